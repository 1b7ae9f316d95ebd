"""Batches that carry no learning signal give loss 0 and leave parameters and optimizer state finite and unchanged."""

import math

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from ..helpers import toy_config, toy_trainer


@pytest.fixture
def task(toy_task):
    return toy_task


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


def unscorable_reward(completions, **kwargs):
    return [None] * len(completions)


# A one-token completion never reaches the end-of-sequence token of a toy answer, so every completion is truncated.
ALL_TRUNCATED = {"max_completion_length": 1, "mask_truncated_completions": True}

CASES = {
    "dapo-all-truncated": (DAPOTrainer, DAPOConfig, {**ALL_TRUNCATED, "dynamic_sampling": False}, None),
    "dapo-all-truncated-dynamic-sampling": (
        DAPOTrainer,
        DAPOConfig,
        {**ALL_TRUNCATED, "dynamic_sampling_max_rounds": 2},
        None,
    ),
    "dr-grpo-all-truncated": (DrGRPOTrainer, DrGRPOConfig, ALL_TRUNCATED, None),
    "dapo-degenerate-dynamic-sampling-fill": (
        DAPOTrainer,
        DAPOConfig,
        {"dynamic_sampling_max_rounds": 2, "dynamic_sampling_on_exhausted": "fill"},
        constant_reward,
    ),
    "dapo-degenerate-no-dynamic-sampling": (DAPOTrainer, DAPOConfig, {"dynamic_sampling": False}, constant_reward),
    "dapo-unscorable-dynamic-sampling-fill": (
        DAPOTrainer,
        DAPOConfig,
        {"dynamic_sampling_max_rounds": 2},
        unscorable_reward,
    ),
    "dr-grpo-degenerate": (DrGRPOTrainer, DrGRPOConfig, {}, constant_reward),
}


def train(task, tmp_path, trainer_class, config_class, overrides, reward=None):
    extra = {} if reward is None else {"reward_funcs": [reward]}
    trainer = toy_trainer(trainer_class, toy_config(config_class, tmp_path, **overrides), task, **extra)
    initial = {name: parameter.detach().clone() for name, parameter in trainer.model.named_parameters()}
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return trainer, initial, logs


@pytest.mark.parametrize("case", CASES)
def test_batch_without_signal_gives_zero_loss_and_finite_unchanged_state(task, tmp_path, case):
    trainer_class, config_class, overrides, reward = CASES[case]
    trainer, initial, logs = train(task, tmp_path, trainer_class, config_class, overrides, reward)

    assert trainer.state.global_step == 2 and len(logs) == 2
    if "truncated" in case:
        assert all(entry["completions/clipped_ratio"] == 1.0 for entry in logs)
    if getattr(trainer.args, "dynamic_sampling", False) and reward is not None:
        assert all(entry["dynamic_sampling/filled"] == 1.0 for entry in logs)
    for entry in logs:
        assert entry["loss"] == 0.0 and entry["grad_norm"] == 0.0
        assert all(math.isfinite(value) for value in entry.values() if isinstance(value, float)), entry

    for name, parameter in trainer.model.named_parameters():
        assert torch.isfinite(parameter).all(), name
        assert torch.equal(parameter, initial[name]), f"{name} moved on a batch without learning signal"
    optimizer_state = [value for state in trainer.optimizer.state.values() for value in state.values()]
    assert optimizer_state, "the optimizer took no step"
    assert all(torch.isfinite(value).all() for value in optimizer_state if torch.is_tensor(value))


def test_control_a_batch_with_signal_moves_the_parameters(task, tmp_path):
    # Same settings as the cases above, with the toy reward and untruncated completions: the guard above is only
    # meaningful if these settings do train.
    trainer, initial, logs = train(task, tmp_path, DAPOTrainer, DAPOConfig, {"dynamic_sampling": False})
    assert any(entry["grad_norm"] > 0 for entry in logs)
    assert any(not torch.equal(parameter, initial[name]) for name, parameter in trainer.model.named_parameters())
