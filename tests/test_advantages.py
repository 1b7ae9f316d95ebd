"""Advantages on a real one-step run: Dr.GRPO's r - group mean and DAPO's (r - mean) / (std + 1e-4), recomputed
from the rewards the trainer logged for the completions it generated."""

import numpy as np
import pytest

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from . import ref_formulas as ref
from .helpers import toy_config, toy_trainer
from .ref_setup import fresh_toy_task, record_scored_batches

NUM_GENERATIONS = 4


def character_score(text: str) -> float:
    """A deterministic reward of the completion text alone with several levels, so that groups get unequal,
    non-binary rewards and a non-trivial standard deviation."""
    return float(sum(ord(char) for char in text) % 7) - 3.0


def character_score_reward(completions, **kwargs):
    return [character_score(text) for text in completions]


def one_step_scored_batch(trainer_class, config_class, output_dir, **overrides):
    """Trains one step and returns what `_generate_and_score_completions` handed to the loss, with the logged
    completions and rewards of that generation batch."""
    task = fresh_toy_task()  # the untrained policy writes varied text, so rewards differ within groups
    config = toy_config(config_class, output_dir, max_steps=1, num_generations=NUM_GENERATIONS, **overrides)
    trainer = toy_trainer(trainer_class, config, task, reward_funcs=[character_score_reward])
    outputs = record_scored_batches(trainer)
    trainer.train()
    assert len(outputs) == 1
    completions = list(trainer._logs["completion"])
    rewards = np.array(trainer._logs["rewards"]["character_score_reward"], dtype=np.float64)
    advantages = outputs[0]["advantages"].double().numpy()
    assert len(completions) == len(rewards) == len(advantages) == config.generation_batch_size
    # The logged rewards are those of the logged completions, so they are a valid source for the reference.
    np.testing.assert_array_equal(rewards, [character_score(text) for text in completions])
    groups = rewards.reshape(-1, NUM_GENERATIONS)
    assert (groups.std(axis=1) > 0).sum() >= 2, "the check needs groups whose rewards differ"
    return rewards, advantages


def test_dr_grpo_advantage_is_reward_minus_group_mean_exactly(tmp_path):
    rewards, advantages = one_step_scored_batch(DrGRPOTrainer, DrGRPOConfig, tmp_path)
    expected = ref.group_advantages(rewards, NUM_GENERATIONS, scale_by_std=False)
    # Rewards are integers and groups have four members, so r - mean is exact in float32 too.
    np.testing.assert_array_equal(advantages, expected)


@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_dapo_advantage_is_group_standardised_with_trl_epsilon(dynamic_sampling, tmp_path):
    rewards, advantages = one_step_scored_batch(
        DAPOTrainer, DAPOConfig, tmp_path, dynamic_sampling=dynamic_sampling, dynamic_sampling_metric="total"
    )
    expected = ref.group_advantages(rewards, NUM_GENERATIONS, scale_by_std=True, eps=1e-4)
    np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)
    # The comparison separates the candidate formulas: no std division, or a population std, would fail it.
    centred = ref.group_advantages(rewards, NUM_GENERATIONS, scale_by_std=False)
    assert not np.allclose(advantages, centred, rtol=1e-3)
    grouped = rewards.reshape(-1, NUM_GENERATIONS)
    population = ((grouped - grouped.mean(1, keepdims=True)) / (grouped.std(1, keepdims=True) + 1e-4)).ravel()
    assert not np.allclose(advantages, population, rtol=1e-3)
    if dynamic_sampling:
        # Dynamic sampling trains only on groups whose rewards differ.
        assert (rewards.reshape(-1, NUM_GENERATIONS).std(axis=1) > 0).all()
