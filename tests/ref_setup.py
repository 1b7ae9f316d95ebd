"""Shared set-up for the loss, advantage and end-to-end tests: cached toy tasks, hand-made loss batches and a way
to feed fixed per-token log-probs into a real trainer's `_compute_loss`."""

import copy
import dataclasses
from functools import lru_cache

import numpy as np
import torch

from trl_variants.toy import make_toy_task

from .helpers import toy_config


@lru_cache(maxsize=None)
def _cached_task(warm_start_steps: int):
    return make_toy_task(seed=0, warm_start_steps=warm_start_steps)


def fresh_toy_task(warm_start_steps: int = 0):
    """A toy task whose model is a private copy, so tests can train it without affecting each other. The warm
    start is paid once per process for each `warm_start_steps`."""
    task = _cached_task(warm_start_steps)
    return dataclasses.replace(task, model=copy.deepcopy(task.model))


def saved_policy(task, folder) -> str:
    """The task's policy and tokenizer saved in `folder`: beta > 0 makes TRL load a reference model by path, so a
    test of the KL term gives the policy as a saved checkpoint."""
    task.model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    return str(folder)


def loss_trainer(trainer_class, config_class, output_dir, task, model=None, **overrides):
    """A real trainer in train mode, ready for direct `_compute_loss` calls outside the training loop."""
    config = toy_config(config_class, output_dir, **overrides)
    trainer = trainer_class(
        task.model if model is None else model,
        task.reward_funcs,
        args=config,
        train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )
    trainer.model.train()
    # The training loop sets this before each accumulation window; direct calls must set it themselves.
    trainer.current_gradient_accumulation_steps = config.gradient_accumulation_steps
    return trainer


@dataclasses.dataclass
class LossBatch:
    """A hand-made batch in the layout `_compute_loss` reads, plus float64 copies for the reference formulas."""

    inputs: dict
    logps: np.ndarray
    old_logps: np.ndarray
    ref_logps: np.ndarray
    advantages: np.ndarray
    mask: np.ndarray

    def rows(self, start: int, stop: int) -> "LossBatch":
        inputs = {
            key: value[start:stop] if torch.is_tensor(value) and value.dim() > 0 else value
            for key, value in self.inputs.items()
        }
        return LossBatch(
            inputs,
            self.logps[start:stop],
            self.old_logps[start:stop],
            self.ref_logps[start:stop],
            self.advantages[start:stop],
            self.mask[start:stop],
        )


def random_loss_batch(tokenizer, rows: int, width: int, seed: int) -> LossBatch:
    """Completions of lengths 1..width (both ends present), ratios exp(logp - old_logp) spread over roughly
    [0.67, 1.5] so that both clip bounds are crossed, and advantages of both signs."""
    rng = np.random.default_rng(seed)
    operands = rng.integers(0, 10, size=(rows, 2))
    prompts = [f"{a}+{b}=" for a, b in operands]
    prompt_ids = torch.tensor(tokenizer(prompts, add_special_tokens=False)["input_ids"])
    lengths = rng.integers(1, width + 1, size=rows)
    lengths[0], lengths[-1] = 1, width
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    digit_ids = tokenizer.convert_tokens_to_ids(list("0123456789"))
    completion_ids = np.where(mask == 1, rng.choice(digit_ids, size=(rows, width)), tokenizer.pad_token_id)
    # float32 first, so the reference sees exactly the values the trainer sees.
    logps = (-rng.uniform(0.05, 3.0, size=(rows, width))).astype(np.float32)
    old_logps = (logps + rng.uniform(-0.4, 0.4, size=(rows, width))).astype(np.float32)
    ref_logps = (logps + rng.normal(0.0, 0.5, size=(rows, width))).astype(np.float32)
    advantages = rng.normal(size=rows).astype(np.float32)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": torch.tensor(completion_ids),
        "completion_mask": torch.tensor(mask),
        "advantages": torch.tensor(advantages),
        "old_per_token_logps": torch.tensor(old_logps),
        "ref_per_token_logps": torch.tensor(ref_logps),
        "num_items_in_batch": torch.tensor(mask.sum()),
    }
    return LossBatch(
        inputs,
        logps.astype(np.float64),
        old_logps.astype(np.float64),
        ref_logps.astype(np.float64),
        advantages.astype(np.float64),
        mask.astype(np.float64),
    )


def use_fixed_logps(trainer, logps: torch.Tensor) -> None:
    """Makes the trainer's policy forward pass return `logps`: the one patch the loss-math tests need, so that
    the loss and its gradient can be checked against formulas on known numbers."""

    def fixed_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        assert logits_to_keep == logps.shape[1], "the batch's completion width must match the fixed log-probs"
        assert input_ids.shape[0] == logps.shape[0]
        return logps, torch.zeros_like(logps), None

    trainer._get_per_token_logps_and_entropies = fixed_logps


def loss_and_logp_grad(trainer, batch: LossBatch) -> tuple[float, np.ndarray]:
    """The trainer's loss on `batch` and its gradient with respect to the per-token log-probs."""
    return loss_and_grad_at(trainer, batch.inputs, batch.logps)


def loss_and_grad_at(trainer, inputs: dict, logps: np.ndarray) -> tuple[float, np.ndarray]:
    """The trainer's loss on `inputs` when the policy's per-token log-probs are `logps`, and its gradient with
    respect to them."""
    leaf = torch.tensor(logps, dtype=torch.float32, requires_grad=True)
    use_fixed_logps(trainer, leaf)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.item(), leaf.grad.double().numpy()


def record_scored_batches(trainer) -> list[dict]:
    """Records every batch `_generate_and_score_completions` returns during training, leaving it unchanged."""
    outputs = []
    score = trainer._generate_and_score_completions

    def recording_score(inputs):
        outputs.append(score(inputs))
        return outputs[-1]

    trainer._generate_and_score_completions = recording_score
    return outputs
