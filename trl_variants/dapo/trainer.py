"""`DAPOTrainer`: DAPO (clip-higher, dynamic sampling, token-level loss, overlong reward shaping) on TRL."""

import copy
import os

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging
from trl import GRPOTrainer

from ..dynamic_sampling.checkpoint import load_sampler_state, save_sampler_state
from ..dynamic_sampling.trainer import DynamicSamplingMixin
from ..model_card import DAPO_PAPER, TRL_VARIANTS_TAG, VariantModelCardMixin
from ..reliability.trainer import ReliabilityMixin
from ..rewards.overlong import SoftOverlongPunishment, is_soft_overlong_punishment
from ..variant_args import variant_args
from ..vllm_cpu import keep_linear_weights_reloadable
from .clip_higher import clip_higher_idle_reason
from .config import DAPOConfig

logger = logging.get_logger(__name__)


class DAPOTrainer(ReliabilityMixin, DynamicSamplingMixin, VariantModelCardMixin, GRPOTrainer):
    """
    Trainer for DAPO (https://huggingface.co/papers/2503.14476).

    Clip-higher (`epsilon_high`), the token-level loss (`loss_type="dapo"`) and overlong filtering
    (`mask_truncated_completions`) are TRL's own, switched on by [`DAPOConfig`]'s defaults; this class adds the soft
    overlong punishment and dynamic sampling, with carrying and, opt-in, prompt skipping (docs/dynamic_sampling.md;
    docs/architecture.md follows one step through the code). It accepts exactly the arguments of `GRPOTrainer` and
    overrides these methods, each calling `super()` (the mixin that defines it in brackets):

    - `__init__`: `args` must be a `DAPOConfig` (`args=None` builds one named after the model). Appends the soft
      overlong punishment when `overlong_buffer_length` is set (weight 1.0 when `reward_weights` is given, on a copy
      of the caller's config), checks the datasets, and logs one line when clip-higher cannot act (`clip_higher`).
    - `_generate_and_score_completions` (`DynamicSamplingMixin`): in train mode with `dynamic_sampling=True`,
      generation rounds, the keep/drop decision shared by all processes and carrying, then TRL's method on this
      process's trained rows.
    - `_compute_loss` (`DynamicSamplingMixin`): old log-probs for fresh rows beside carried ones, and the carried
      rows' policy ratio (`dynamic_sampling/carried_ratio_mean`, `_max`).
    - `_generate_single_turn` (`DynamicSamplingMixin`): transformers generation in calls of at most
      `max_rows_per_generate_call` rows, a call that runs out of memory halved and retried.
    - `_prepare_inputs` (`DynamicSamplingMixin`): pairs each generation batch with the dataset indices its sampler
      drew, when rows are named by index (prompt skipping).
    - `_get_dataloader` (`DynamicSamplingMixin`): then the train sampler records the indices it yields.
    - `get_resumed_dataloader` (`DynamicSamplingMixin`): drops the recorded indices of the batches a resume skips.
    - `_get_train_sampler` (`ReliabilityMixin`): TRL's `RepeatSampler`, drawing on resume what an uninterrupted run
      would, and cycled when the dataset has fewer prompts than one generation batch.
    - `_calculate_rewards` (`ReliabilityMixin`): every reward call is checked; a failure stops all processes together.
    - `train` (`ReliabilityMixin`): resumes from the latest complete checkpoint and refuses a half-written one.
    - `_save_checkpoint`: saves the dynamic-sampling state first, before transformers' own files.
    - `_load_optimizer_and_scheduler`: also restores that state.
    - `create_model_card` (`VariantModelCardMixin`): tags `trl-variants` and `dapo`, the paper, the settings, and no
      link to a base model or dataset that is not on the Hub.

    Every place where the package replaces a TRL attribute for the length of a call is in
    `trl_variants.dynamic_sampling.trl_hooks`, with the TRL layout it relies on.
    """

    _tag_names = ["trl", TRL_VARIANTS_TAG, "dapo"]
    _name = "DAPO"
    _paper = DAPO_PAPER

    def __init__(self, model, reward_funcs=None, args=None, *positional, **kwargs):
        args = variant_args(
            "DAPOTrainer",
            DAPOConfig,
            model,
            args,
            run_suffix="DAPO",
            why="DAPOConfig carries DAPO's defaults and the overlong-punishment and dynamic-sampling fields.",
        )
        reward_funcs, args = self._with_overlong_punishment(reward_funcs, args)
        keep_linear_weights_reloadable(args)
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        self.setup_reliability_checks()
        self.setup_dynamic_sampling()
        self._log_if_clip_higher_idle()

    def _log_if_clip_higher_idle(self) -> None:
        args = self.args
        reason = clip_higher_idle_reason(
            args.epsilon, args.epsilon_high, args.loss_type, args.gradient_accumulation_steps,
            args.steps_per_generation, args.num_iterations, self.dynamic_sampler.options.carry_surplus,
        )  # fmt: skip
        if reason is not None and self.accelerator.is_main_process:
            logger.info(reason)

    @staticmethod
    def _with_overlong_punishment(reward_funcs, args: DAPOConfig):
        if args.overlong_buffer_length is None:
            return reward_funcs, args
        if reward_funcs is None:
            reward_funcs = []
        elif not isinstance(reward_funcs, list):
            reward_funcs = [reward_funcs]
        if any(is_soft_overlong_punishment(func) for func in reward_funcs):
            raise ValueError(
                "reward_funcs already contains a soft overlong punishment and overlong_buffer_length="
                f"{args.overlong_buffer_length} would add a second one; remove it from reward_funcs or set "
                "overlong_buffer_length=None."
            )
        if args.reward_weights is not None:
            if len(args.reward_weights) != len(reward_funcs):
                raise ValueError(
                    f"reward_weights has {len(args.reward_weights)} entries but there are {len(reward_funcs)} reward "
                    "functions; give one weight per function you pass (the overlong punishment gets weight 1.0)."
                )
            # A copy, so that the caller's config can build another trainer.
            args = copy.copy(args)
            args.reward_weights = [*args.reward_weights, 1.0]
        punishment = SoftOverlongPunishment(
            args.max_completion_length, args.overlong_buffer_length, args.overlong_penalty_factor
        )
        return [*reward_funcs, punishment], args

    def _variant_settings(self) -> dict[str, object]:
        args = self.args
        settings = {
            "clip range (epsilon, epsilon_high)": (args.epsilon, args.epsilon_high),
            "loss_type": args.loss_type,
            "scale_rewards": args.scale_rewards,
            "beta": args.beta,
            "num_generations": args.num_generations,
            "max_completion_length": args.max_completion_length,
            "overlong filtering (mask_truncated_completions)": args.mask_truncated_completions,
            "soft overlong punishment (buffer, factor)": (
                (args.overlong_buffer_length, args.overlong_penalty_factor)
                if args.overlong_buffer_length is not None
                else "off"
            ),
            "dynamic_sampling": args.dynamic_sampling,
        }
        if args.dynamic_sampling:
            settings["dynamic sampling (metric, max rounds, on exhausted)"] = (
                args.dynamic_sampling_metric,
                args.dynamic_sampling_max_rounds,
                args.dynamic_sampling_on_exhausted,
            )
            options = self.dynamic_sampler.options
            settings["dynamic sampling carries surplus groups"] = (
                options.carry_surplus if options.carry_off_reason is None else f"False ({options.carry_off_reason})"
            )
            if options.skip_degenerate_prompts and args.skip_predictor == "posterior":
                settings["skip degenerate prompts (posterior: memory epochs, min explore probability)"] = (
                    args.skip_memory_epochs,
                    args.skip_min_explore_probability,
                )
            elif options.skip_degenerate_prompts:
                settings["skip degenerate prompts (streak: target share, p step, min explore probability)"] = (
                    args.skip_target_degenerate_share,
                    args.skip_probability_step,
                    args.skip_min_explore_probability,
                )
            if args.dynamic_sampling_allocation:
                settings["dynamic sampling allocation (posterior memory epochs)"] = args.skip_memory_epochs
        return settings

    def _save_checkpoint(self, model, trial):
        # Written before transformers' own files, so that its `trainer_state.json` stays the last file of a complete
        # checkpoint and old checkpoints are rotated away only once this one is whole.
        checkpoint_name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        checkpoint_dir = os.path.join(self._get_output_dir(trial=trial), checkpoint_name)
        if self.args.should_save:
            os.makedirs(checkpoint_dir, exist_ok=True)
        save_sampler_state(self.dynamic_sampler, checkpoint_dir)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            load_sampler_state(self.dynamic_sampler, checkpoint)
