"""Building vLLM-generating trainers on the toy task, and recording what passes between them and the engine.

The recorder wraps the trainer's real vLLM calls (nothing is simulated): every `generate` call with the prompts it
got and the completions and sampling log-probs vLLM returned, every weight sync with how far the engine's weights
then are from the trainer's, and every batch TRL's loss receives.
"""

import dataclasses
from collections import defaultdict

import torch
from transformers import AutoModelForCausalLM

from ..helpers import toy_config, toy_trainer

# vLLM holds the weights in bfloat16 on a CPU: 8 bits of mantissa.
BF16_RELATIVE = 2.0**-8
VLLM_SETTINGS = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=64)


def vllm_config(config_class, output_dir, **overrides):
    """A toy-task config of `config_class` that generates with vLLM in colocate mode."""
    return toy_config(config_class, output_dir, **{**VLLM_SETTINGS, **overrides})


def vllm_trainer(trainer_class, config, task, policy_folder, **kwargs):
    """A trainer on a fresh copy of the policy saved in `policy_folder` (vLLM loads the model by its path)."""
    model = AutoModelForCausalLM.from_pretrained(policy_folder)
    return toy_trainer(trainer_class, config, dataclasses.replace(task, model=model), **kwargs)


@dataclasses.dataclass
class GenerateCall:
    step: int
    training: bool
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]  # vLLM's log-prob of each sampled token


class VLLMRecorder:
    """Records a trainer's vLLM generate calls, weight syncs and loss inputs; install before `train()`."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.generate_calls: list[GenerateCall] = []
        self.syncs: list[dict] = []
        self.loss_inputs: list[dict] = []
        generation = trainer.vllm_generation
        generate, sync_weights, compute_loss = generation.generate, generation.sync_weights, trainer._compute_loss

        def recording_generate(*args, **kwargs):
            output = generate(*args, **kwargs)
            prompt_ids, completion_ids, logprobs, _ = output
            self.generate_calls.append(
                GenerateCall(
                    step=trainer.state.global_step,
                    training=trainer.model.training,
                    prompt_ids=[list(ids) for ids in prompt_ids],
                    completion_ids=[list(ids) for ids in completion_ids],
                    logprobs=[[top[0] for top in row] for row in logprobs],
                )
            )
            return output

        def recording_sync_weights():
            sync_weights()
            self.syncs.append({"step": trainer.state.global_step, "weight_error": engine_weight_error(trainer)})

        def recording_loss(model, inputs):
            self.loss_inputs.append(
                {"step": trainer.state.global_step}
                | {key: value.detach().clone() for key, value in inputs.items() if torch.is_tensor(value)}
            )
            return compute_loss(model, inputs)

        generation.generate = recording_generate
        generation.sync_weights = recording_sync_weights
        trainer._compute_loss = recording_loss

    def train_calls(self, step: int) -> list[GenerateCall]:
        return [call for call in self.generate_calls if call.training and call.step == step]

    def sampled(self) -> dict[tuple, list[list[float]]]:
        """vLLM's sampling log-probs of every generated (prompt ids, completion ids) pair."""
        return self.sampled_in(self.generate_calls)

    @staticmethod
    def sampled_in(calls: list[GenerateCall]) -> dict[tuple, list[list[float]]]:
        found = defaultdict(list)
        for call in calls:
            for prompt, completion, logprobs in zip(call.prompt_ids, call.completion_ids, call.logprobs, strict=True):
                found[(tuple(prompt), tuple(completion))].append(logprobs)
        return found


def loss_rows(inputs: dict):
    """(prompt ids, completion ids, row index) of every row of one batch TRL's loss received."""
    for i in range(inputs["prompt_ids"].shape[0]):
        prompt = inputs["prompt_ids"][i][inputs["prompt_mask"][i].bool()].tolist()
        completion = inputs["completion_ids"][i][inputs["completion_mask"][i].bool()].tolist()
        yield prompt, completion, i


def completion_logps(model, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    """Log-probs of `completion_ids` after `prompt_ids` under `model` (temperature 1), by a plain forward."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt_ids) - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def engine_weights(trainer) -> dict[str, torch.Tensor]:
    """The weights inside the trainer's vLLM engine, by name (vLLM fuses q/k/v and gate/up projections)."""
    engine_model = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    return {name: param.detach().float().cpu() for name, param in engine_model.named_parameters()}


def engine_weight_error(trainer, model=None) -> float:
    """Largest difference between the engine's weights and `model`'s (default: the trainer's), in units of
    bfloat16 rounding (|engine - model| / (BF16_RELATIVE * max|model|) per tensor): at most 1 when the engine holds
    `model`'s weights."""
    model = trainer.model if model is None else model
    trained = {name: param.detach().float().cpu() for name, param in model.named_parameters()}
    fused = {".qkv_proj.": (".q_proj.", ".k_proj.", ".v_proj."), ".gate_up_proj.": (".gate_proj.", ".up_proj.")}
    worst = 0.0
    for name, held in engine_weights(trainer).items():
        fused_key = next((key for key in fused if key in name), None)
        parts = [name.replace(fused_key, part) for part in fused[fused_key]] if fused_key else [name]
        expected = torch.cat([trained[part] for part in parts])
        # vLLM pads the vocabulary rows of the embedding to a multiple of 64.
        held = held[tuple(slice(0, size) for size in expected.shape)]
        scale = BF16_RELATIVE * expected.abs().max().clamp_min(1e-12)
        worst = max(worst, float((held - expected).abs().max() / scale))
    return worst
