"""`dynamic_sampling/reward_all_groups`: the mean weighted reward over every completion generated for a step, all
rounds included, checked against the values the reward functions themselves returned during that step."""

import math

import pytest
import torch
from transformers import TrainerCallback

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling.selection import ALL_GROUPS_REWARD_METRIC, total_reward_sum
from trl_variants.toy import toy_accuracy_reward

from .helpers import toy_config, toy_trainer


def test_total_reward_sum_weights_functions_and_counts_none_as_zero():
    rewards = torch.tensor([[1.0, 2.0], [-1.0, math.nan], [0.0, 4.0]])
    total, count = total_reward_sum(rewards, torch.tensor([1.0, 0.5]))
    assert (total, count) == (pytest.approx(2.0 - 1.0 + 2.0), 3)


class StepBoundaries(TrainerCallback):
    def __init__(self, calls):
        self.calls, self.ends = calls, []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(len(self.calls))


def test_all_groups_reward_is_the_mean_over_every_generated_completion(toy_task, tmp_path):
    calls = []  # (accuracy rewards, length rewards) per reward call, in the order the trainer made them

    def recorded_accuracy(completions, answer, **kwargs):
        rewards = toy_accuracy_reward(completions, answer)
        calls.append([rewards])
        return rewards

    def recorded_length(completions, **kwargs):
        # None for every third completion: TRL counts it as 0 in the weighted sum.
        rewards = [None if index % 3 == 0 else -0.1 * len(text) for index, text in enumerate(completions)]
        calls[-1].append(rewards)
        return rewards

    weights = [1.0, 0.5]
    config = toy_config(DAPOConfig, tmp_path, reward_weights=weights, dynamic_sampling_max_rounds=3)
    boundaries = StepBoundaries(calls)
    trainer = toy_trainer(
        DAPOTrainer, config, toy_task, reward_funcs=[recorded_accuracy, recorded_length], callbacks=[boundaries]
    )
    trainer.train()

    logs = [entry for entry in trainer.state.log_history if ALL_GROUPS_REWARD_METRIC in entry]
    assert len(logs) == config.max_steps
    starts = [0, *boundaries.ends[:-1]]
    for log, start, end in zip(logs, starts, boundaries.ends, strict=True):
        totals = [
            weights[0] * accuracy + weights[1] * (0.0 if length is None else length)
            for accuracy_rewards, length_rewards in calls[start:end]
            for accuracy, length in zip(accuracy_rewards, length_rewards, strict=True)
        ]
        assert len(totals) == log["dynamic_sampling/generated_groups"] * config.num_generations
        assert log[ALL_GROUPS_REWARD_METRIC] == pytest.approx(sum(totals) / len(totals), abs=1e-6)
        assert "reward" in log  # TRL's own metric is still logged beside it
