"""The TRL code the package overrides, calls or imports, and what it relies on in each (data only).

Each entry is named as the package reaches it: a dotted import (`trl.trainer.utils.pad`) or `Class.method` for a
method of a TRL class the package subclasses or calls through an instance. A method is looked up along its class's
chain of bases (`CLASS_CHAINS`), as Python's method resolution would find it, so a method that moves between TRL's
classes, or that TRL starts overriding where transformers defined it, is reported. `tests/test_trl_surface.py`
fails when the package imports or overrides a TRL name that is not listed here.
"""

from dataclasses import dataclass

# Each class the package subclasses or calls methods of, and its bases down to the one defining the methods used:
# `path:ClassName`, the path relative to the folder holding the libraries.
CLASS_CHAINS = {
    "GRPOTrainer": (
        "trl/trainer/grpo_trainer.py:GRPOTrainer",
        "trl/trainer/base_trainer.py:_BaseTrainer",
        "transformers/trainer.py:Trainer",
    ),
    "GRPOConfig": (
        "trl/trainer/grpo_config.py:GRPOConfig",
        "trl/trainer/base_config.py:_BaseConfig",
        "transformers/training_args.py:TrainingArguments",
    ),
    "TrlParser": ("trl/scripts/utils.py:TrlParser", "trl/scripts/_hf_argparser.py:HfArgumentParser"),
    "RepeatSampler": ("trl/trainer/utils.py:RepeatSampler",),
}


@dataclass(frozen=True)
class SurfaceEntry:
    """`name`: how the package reaches it; `relies_on`: the signature and what it returns or mutates, as far as
    the package depends on it; `source`: `path:qualname` where it is defined (`None`: a `Class.method` looked up
    along `CLASS_CHAINS`); `header_only`: fingerprint a class without its methods (they have entries of their own)."""

    name: str
    relies_on: str
    source: str | None = None
    header_only: bool = False


# Each use of a private name of TRL's trainer (`_x`: its own, its bases', or what they set on `self`) outside
# dynamic_sampling/trl_hooks.py, where all others are, with why it stays: (file under trl_variants/, the function using
# it, the name) -> why. An override calling `super()._x` from its own `_x` is none. tests/test_trl_surface.py fails on
# any unrecorded use, and on a recorded one that is gone.
PRIVATE_USES_OUTSIDE_HOOKS = {
    ("model_card.py", "VariantModelCardMixin.create_model_card", "_name"):
        "It reads back the `_name` class attribute the variant trainers set for TRL's own model card (entry "
        "`trl.GRPOTrainer`); model_card.py sits below dynamic_sampling/ in the import layers, so it cannot call "
        "trl_hooks.py.",
}

GRPO = "trl/trainer/grpo_trainer.py"
UTILS = "trl/trainer/utils.py"
SCRIPTS = "trl/scripts/utils.py"

# fmt: off
# One entry a paragraph: its name, what the package relies on, then the source where it is not a `Class.method`.
ENTRIES = (
    # The classes the variants subclass.
    SurfaceEntry("trl.GRPOTrainer",
        "Subclassed by DAPOTrainer and DrGRPOTrainer; its bases (`_BaseTrainer`, transformers' `Trainer`) and the "
        "class attributes `_tag_names`, `_name`, `_paper` that its model card reads.",
        f"{GRPO}:GRPOTrainer", header_only=True),
    SurfaceEntry("trl.GRPOConfig",
        "Subclassed by DAPOConfig and DrGRPOConfig: its fields, their defaults and help texts (the configs redefine "
        "epsilon, epsilon_high, loss_type, beta, scale_rewards, mask_truncated_completions).",
        "trl/trainer/grpo_config.py:GRPOConfig", header_only=True),
    SurfaceEntry("GRPOConfig.__post_init__",
        "(self): resolves steps_per_generation and generation_batch_size, turns use_transformers_paged into "
        "continuous batching and checks GRPO's fields; the variant configs check their own fields before it and "
        "the fields it resolves after it."),
    # GRPOTrainer's methods the variants override (each calls super()).
    SurfaceEntry("GRPOTrainer.__init__",
        "(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, reward_processing_classes, "
        "callbacks, optimizers, quantization_config, peft_config, tools, rollout_func, environment_factory): the "
        "variants pass these through unchanged. Sets what the package reads on the trainer: reward_funcs, "
        "reward_func_names, rollout_func, tools, environment_factories, environments, max_tool_calling_iterations, "
        "num_generations, num_iterations, use_vllm, use_transformers_continuous_batching, "
        "vllm_importance_sampling_correction, shuffle_dataset, _is_vlm, _tokenizer, _metrics (train/eval -> name -> "
        "list), _pending_extra_logs, _dist (DistributedBackend: is_zero3, summon_full_params)."),
    SurfaceEntry("GRPOTrainer._calculate_rewards",
        "(inputs, prompts, completions, completion_ids_list) -> tensor (rows of every process, reward functions): "
        "calls each of self.reward_funcs (read at call time) on this process's rows, then gathers every process's, "
        "in process order (trl_hooks: rewards_like_trl, replaying_generation_and_rewards, reward_funcs_replaced)."),
    SurfaceEntry("GRPOTrainer._compute_loss",
        "(model, inputs) -> loss: its first `_get_per_token_logps_and_entropies` call is the policy forward, and it "
        "reads inputs['old_per_token_logps'] after that call (carrying fills it there); `loss_type` selects the "
        "objective."),
    SurfaceEntry("GRPOTrainer._generate_and_score_completions",
        "(inputs: list of dataset rows) -> dict of padded tensors: prepares prompts (environments, tools, images), "
        "calls self._generate(prompts) once, then self._calculate_rewards, the old/reference log-prob calls (the "
        "old-policy one first) and the advantages; logs into self._metrics."),
    SurfaceEntry("GRPOTrainer._generate_single_turn",
        "(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False) -> (completion ids per "
        "row, log-probs per row or None): one transformers `generate` call per invocation when neither vLLM nor "
        "continuous batching is used."),
    SurfaceEntry("GRPOTrainer._get_dataloader",
        "(dataset, description, batch_size, sampler_fn=None, is_training=False, dataloader_key=None) -> DataLoader, "
        "or accelerate's DataLoaderDispatcher with dispatch_batches; the training sampler is built by sampler_fn."),
    SurfaceEntry("GRPOTrainer._get_train_sampler",
        "(dataset=None) -> RepeatSampler(data_source, mini_repeat_count, batch_size, repeat_count, shuffle, seed)."),
    SurfaceEntry("GRPOTrainer._load_optimizer_and_scheduler",
        "(checkpoint): restores optimizer and scheduler (and TRL's entropy state); called on resume with the "
        "checkpoint folder, None otherwise."),
    SurfaceEntry("GRPOTrainer._prepare_inputs",
        "(generation_batch: list of rows) -> one micro-batch: in train mode calls _generate_and_score_completions "
        "once per steps_per_generation * num_iterations steps and buffers its split."),
    SurfaceEntry("GRPOTrainer._save_checkpoint",
        "(model, trial): writes the model card and transformers' checkpoint files into "
        "output_dir/checkpoint-<global_step>, trainer_state.json last."),
    SurfaceEntry("GRPOTrainer.create_model_card",
        "(model_name=None, dataset_name=None, tags=None): writes output_dir/README.md on the main process, with a "
        "'## Training procedure' section ending at '### Framework versions'; uses _tag_names, _name, _paper."),
    SurfaceEntry("GRPOTrainer.get_resumed_dataloader",
        "(dataloader, num_batches) -> a dataloader that skips the first num_batches batches on resume (drawn from "
        "the sampler, never delivered)."),
    SurfaceEntry("GRPOTrainer.train",
        "(resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None) -> TrainOutput; "
        "resume_from_checkpoint=True picks the highest-numbered checkpoint-* folder."),
    # GRPOTrainer's methods the package calls or intercepts by name.
    SurfaceEntry("GRPOTrainer._generate",
        "(prompts) -> (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, "
        "tool_images): read as an instance attribute by its caller (so an instance override intercepts it); uses "
        "self.rollout_func (dict with prompt_ids, completion_ids, logprobs, env_mask, extra keys) when set, runs "
        "self._tool_call_loop with tools (trl_hooks: generate_like_trl, replaying_generation_and_rewards)."),
    SurfaceEntry("GRPOTrainer._tool_call_loop",
        "(prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields) -> (tool_mask, "
        "completions, completion_ids, logprobs, tool_call_count, tool_failure_count, tool_images); read as an "
        "instance attribute; executes tools from self._sync_tool_dicts / self._async_tool_dicts, counting calls of "
        "the first max_tool_calling_iterations assistant messages (trl_hooks: generate_like_trl, "
        "replaying_tools_and_environments)."),
    SurfaceEntry("GRPOTrainer._get_per_token_logps_and_entropies",
        "(model, input_ids, attention_mask, logits_to_keep, batch_size=None, ...) -> (logps, entropies, aux): read "
        "as an instance attribute by _generate_and_score_completions and _compute_loss; rows are independent, one "
        "forward per `batch_size` rows (carrying scores a subset of rows, with its row-indexed token-type ids; "
        "trl_hooks: next_logps_call_through, policy_logps)."),
    SurfaceEntry("GRPOTrainer._get_output_dir",
        "(trial) -> str: the folder holding checkpoint-* folders (trl_hooks.checkpoint_folder: DAPOTrainer's "
        "_save_checkpoint writes there first)."),
    SurfaceEntry("trl.generation.vllm_generation.VLLMGeneration",
        "The trainer's `vllm_generation` (colocate mode, `enable_sleep_mode`): `generate` pushes the weights through "
        "`self.sync_weights()` when `self._llm_weights_sleeping`, wakes the KV cache with "
        "`self.llm.wake_up(tags=[\"kv_cache\"])`, and after generating calls `self.llm.sleep(level=2)` and sets "
        "`_llm_weights_sleeping`; `sync_weights` wakes the weights with `self.llm.wake_up` and pushes every weight. "
        "trl_hooks.engine_awake_across_rounds reads these as instance attributes, and puts off the "
        "sleep and skips the wake-ups and pushes between a step's rounds.",
        "trl/generation/vllm_generation.py:VLLMGeneration"),
    # Functions and classes the package imports.
    SurfaceEntry("trl.trainer.utils.RepeatSampler",
        "(data_source, mini_repeat_count, batch_size=1, repeat_count=1, shuffle=True, seed=None): attributes of "
        "those names plus num_samples and generator; __iter__ draws one permutation of num_samples per iteration.",
        f"{UTILS}:RepeatSampler", header_only=True),
    SurfaceEntry("RepeatSampler.__init__",
        "(data_source, mini_repeat_count, batch_size, repeat_count, shuffle, seed): stores them."),
    SurfaceEntry("RepeatSampler.__iter__",
        "Yields each index mini_repeat_count times, in batches of batch_size prompts repeated repeat_count times; "
        "incomplete batches dropped."),
    SurfaceEntry("RepeatSampler.__len__",
        "-> (num_samples // batch_size) * batch_size * mini_repeat_count * repeat_count."),
    SurfaceEntry("trl.trainer.utils.pad",
        "(tensors, padding_value=0, padding_side='right', pad_to_multiple_of=None) -> one stacked, padded tensor.",
        f"{UTILS}:pad"),
    SurfaceEntry("trl.trainer.utils.split_pixel_values_by_grid",
        "(batch with pixel_values, image_grid_thw, num_images) -> batch with pixel_values as a list of per-row "
        "tensors.",
        f"{UTILS}:split_pixel_values_by_grid"),
    SurfaceEntry("trl.trainer.utils.unsplit_pixel_values_by_grid",
        "(batch) -> batch with per-row pixel_values concatenated back into one tensor; other keys unchanged.",
        f"{UTILS}:unsplit_pixel_values_by_grid"),
    SurfaceEntry("trl.trainer.utils.is_async_callable",
        "(func) -> bool: whether a reward function is awaited by _calculate_rewards.", f"{UTILS}:is_async_callable"),
    SurfaceEntry("trl.trainer.utils.get_config_model_id",
        "(config) -> str: the model id that names the default output_dir when args=None.",
        f"{UTILS}:get_config_model_id"),
    SurfaceEntry("trl.models.utils.disable_gradient_checkpointing",
        "(model, gradient_checkpointing_kwargs=None): context manager, turns checkpointing off for a no-grad forward "
        "and restores it.",
        "trl/models/utils.py:disable_gradient_checkpointing"),
    # Behaviour relied on through GRPOTrainer._generate_single_turn, which dynamic sampling calls once per cut call.
    SurfaceEntry("trl.models.utils.unwrap_model_for_generation",
        "(model, accelerator, gather_deepspeed3_params=True, generation_kwargs=None, gradient_checkpointing_kwargs="
        "None): context manager around each generate call; enters _unwrap_model_for_generation.",
        "trl/models/utils.py:unwrap_model_for_generation"),
    SurfaceEntry("trl.models.utils._unwrap_model_for_generation",
        "Under ZeRO-3 it gathers the parameters on entry, a collective, so every process must make the same number "
        "of generate calls (why generate_calls never halves a call alone there); turns gradient checkpointing off "
        "for generation and back on.",
        "trl/models/utils.py:_unwrap_model_for_generation"),
    SurfaceEntry("trl.models.utils.add_hooks",
        "(model: DeepSpeedEngine) -> None: puts back ZeRO-3's parameter-offload hooks that "
        "_unwrap_model_for_generation removed; generate_calls calls it after a failed generate call.",
        "trl/models/utils.py:add_hooks"),
    SurfaceEntry("trl.rewards.get_soft_overlong_punishment",
        "(max_completion_len, soft_punish_cache) -> reward function of completion_ids: 0, then linear down to -1 "
        "over the last soft_punish_cache tokens, -1 beyond.",
        "trl/rewards/other_rewards.py:get_soft_overlong_punishment"),
    SurfaceEntry("trl.rewards.other_rewards._SoftOverlongPunishment",
        "The class get_soft_overlong_punishment returns (recognised so that no second punishment is appended).",
        "trl/rewards/other_rewards.py:_SoftOverlongPunishment"),
    SurfaceEntry("trl.rewards.accuracy_reward",
        "(completions, solution, log_extra=None, **kwargs) -> list of float or None; by name on the command line.",
        "trl/rewards/accuracy_rewards.py:accuracy_reward"),
    SurfaceEntry("trl.rewards.reasoning_accuracy_reward",
        "(completions, solution, reasoning_delimiters=None, log_extra=None, **kwargs) -> list of float or None.",
        "trl/rewards/accuracy_rewards.py:reasoning_accuracy_reward"),
    SurfaceEntry("trl.rewards.think_format_reward",
        "(completions, **kwargs) -> list of float.", "trl/rewards/format_rewards.py:think_format_reward"),
    # The command line: TRL's parser, argument classes and script helpers.
    SurfaceEntry("trl.TrlParser",
        "(dataclass_types, **kwargs): parse_args_and_config reads a YAML recipe through set_defaults_with_config; "
        "subclassed by the command line's VariantParser.",
        f"{SCRIPTS}:TrlParser", header_only=True),
    SurfaceEntry("TrlParser.__init__", "(dataclass_types=None, **kwargs): adds every dataclass's fields as arguments."),
    SurfaceEntry("TrlParser.set_defaults_with_config",
        "(**kwargs) -> list of unconsumed strings: sets the recipe's values as defaults."),
    SurfaceEntry("TrlParser._add_dataclass_arguments",
        "(dtype): calls self._parse_dataclass_field(parser, field) for each field of dtype."),
    SurfaceEntry("TrlParser._parse_dataclass_field",
        "(parser, field), a staticmethod: adds the field's option(s), with --no_<field> for bools defaulting to True."),
    SurfaceEntry("trl.ScriptArguments",
        "A dataclass of dataset_name, dataset_config, dataset_train_split, dataset_test_split, ...; subclassed by "
        "VariantScriptArguments.",
        f"{SCRIPTS}:ScriptArguments"),
    SurfaceEntry("trl.DatasetMixtureConfig",
        "A dataclass of a recipe's `datasets:` entries, read by get_dataset.", f"{SCRIPTS}:DatasetMixtureConfig"),
    SurfaceEntry("trl.ModelConfig",
        "A dataclass of model and LoRA fields, read by get_peft_config and get_quantization_config.",
        "trl/trainer/model_config.py:ModelConfig"),
    SurfaceEntry("trl.get_dataset",
        "(mixture_config: DatasetMixtureConfig) -> DatasetDict of the mixture's splits.", f"{SCRIPTS}:get_dataset"),
    SurfaceEntry("trl.get_peft_config", "(model_args: ModelConfig) -> PeftConfig or None.", f"{UTILS}:get_peft_config"),
    SurfaceEntry("trl.get_quantization_config",
        "(model_args: ModelConfig) -> BitsAndBytesConfig or None.", f"{UTILS}:get_quantization_config"),
    SurfaceEntry("trl.cli.accelerate_config.resolve_accelerate_config_argument",
        "(launch_args: list of str) -> list of str with `--accelerate_config NAME_OR_PATH` turned into accelerate's "
        "`--config_file PATH` (a name resolved to the file TRL ships).",
        "trl/cli/accelerate_config.py:resolve_accelerate_config_argument"),
    SurfaceEntry("trl.cli.commands.training._subtract_subsequence",
        "(lst: list of str, subseq: list of str) -> lst with the ordered subsequence subseq taken out (the "
        "launcher's flags out of the command line, leaving the training script's).",
        "trl/cli/commands/training.py:_subtract_subsequence"),
)
# fmt: on
