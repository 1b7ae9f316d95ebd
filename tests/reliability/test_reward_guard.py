"""Reward functions are checked on every call: bad output or an exception stops training with a clear error."""

import functools
import math

import numpy as np
import pytest
import torch
from trl.trainer.utils import get_callable_name, is_async_callable

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer
from trl_variants.reliability.reward_guard import (
    GuardedRewardFunction,
    RewardFunctionError,
    as_reward_list,
    find_reward_problem,
    guard_reward_funcs,
    shorten_prompt,
)
from trl_variants.rewards import SoftOverlongPunishment, is_soft_overlong_punishment
from trl_variants.toy import toy_accuracy_reward

from ..helpers import toy_config, toy_trainer

PROMPTS = ["1+2=", "3+4=", "5+5=", "9+0="]


@pytest.fixture
def task(toy_task):
    return toy_task


def problem(output):
    return find_reward_problem("my_reward", as_reward_list(output), output, PROMPTS)


@pytest.mark.parametrize(
    "output",
    [
        [1.0, -1.0, 0.5, 0],
        [1.0, None, None, 2],  # None: TRL skips the completion
        (1, 2, 3, 4),
        np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32),
        torch.tensor([1.0, 2.0, 3.0, 4.0]),
        [np.float64(1.0), torch.tensor(2.0), True, 3],
        (value for value in [1.0, 2.0, 3.0, 4.0]),
    ],
)
def test_valid_reward_outputs_pass(output):
    assert problem(output) is None


@pytest.mark.parametrize(
    "output, expected",
    [
        ([1.0, 2.0, 3.0], "returned 3 rewards for 4 completions"),
        ([1.0, 2.0, 3.0, 4.0, 5.0], "returned 5 rewards for 4 completions"),
        ([1.0, 2.0, float("nan"), 4.0], "returned NaN for sample 2 of 4 (prompt: '5+5=')"),
        ([1.0, math.inf, 3.0, 4.0], "returned inf (infinite) for sample 1 of 4 (prompt: '3+4=')"),
        ([1.0, 2.0, 3.0, -math.inf], "returned -inf (infinite) for sample 3 of 4 (prompt: '9+0=')"),
        ([1.0, "0.5", 3.0, 4.0], "returned the non-numeric value '0.5' (type str) for sample 1 of 4"),
        ([[1.0], 2.0, 3.0, 4.0], "returned the non-numeric value [1.0] (type list) for sample 0 of 4"),
        ([1.0, 2.0, 3.0, torch.tensor(float("nan"))], "returned NaN for sample 3 of 4"),
        (1.0, "returned 1.0 of type float"),
        (None, "returned None of type NoneType"),
        ("1.0", "returned '1.0' of type str"),
        (torch.tensor(1.0), "returned tensor(1.) of type Tensor"),
    ],
)
def test_invalid_reward_outputs_are_described(output, expected):
    message = problem(output)
    assert message is not None and message.startswith("Reward function 'my_reward' ")
    assert expected in message
    assert "expected a list of 4 finite numbers" in message


def test_prompt_preview_is_shortened_and_reads_conversations():
    long_prompt = "Solve " + "x" * 300
    assert len(shorten_prompt(long_prompt)) == 80 and shorten_prompt(long_prompt).endswith("...")
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is\n 2+2?"}]
    assert shorten_prompt(conversation) == "What is 2+2?"


class CallableReward:
    def __call__(self, completions, **kwargs):
        return [0.0] * len(completions)


async def async_reward(completions, **kwargs):
    return [0.0] * len(completions)


def test_guards_keep_trl_names_async_detection_and_reward_models():
    funcs = [toy_accuracy_reward, functools.partial(toy_accuracy_reward), CallableReward(), async_reward]
    names = [get_callable_name(func) for func in funcs]
    reward_model = torch.nn.Linear(1, 1)
    guarded = guard_reward_funcs([*funcs, reward_model], [*names, "linear"], [])
    assert [get_callable_name(func) for func in guarded[:4]] == names
    assert names == ["toy_accuracy_reward", "toy_accuracy_reward", "CallableReward", "async_reward"]
    assert [is_async_callable(func) for func in guarded[:4]] == [False, False, False, True]
    assert guarded[4] is reward_model
    for func, original in zip(guarded, funcs):
        assert isinstance(func, GuardedRewardFunction) and func.wrapped is original


def recording(reward):
    """Wraps a reward to keep the prompts of each call, so a test can check what the error message quotes."""
    seen = []

    def recorded_reward(prompts, completions, answer, **kwargs):
        seen.append(list(prompts))
        return reward(completions, answer)

    recorded_reward.seen = seen
    return recorded_reward


def with_value_at(index, value):
    def reward(completions, answer):
        rewards = toy_accuracy_reward(completions, answer)
        rewards[index] = value
        return rewards

    return reward


@pytest.mark.parametrize(
    "trainer_class, config_class, bad_value, expected",
    [
        # DAPO scores rewards inside its dynamic-sampling rounds, Dr.GRPO inside TRL's own scoring pass.
        (DAPOTrainer, DAPOConfig, float("nan"), "returned NaN for sample 5 of 16"),
        (DrGRPOTrainer, DrGRPOConfig, float("inf"), "returned inf (infinite) for sample 5 of 16"),
        (DrGRPOTrainer, DrGRPOConfig, "1", "returned the non-numeric value '1' (type str) for sample 5 of 16"),
    ],
)
def test_bad_reward_value_stops_training_naming_function_value_sample_and_prompt(
    task, tmp_path, trainer_class, config_class, bad_value, expected
):
    reward = recording(with_value_at(5, bad_value))
    trainer = toy_trainer(trainer_class, toy_config(config_class, tmp_path), task, reward_funcs=[reward])
    initial = [parameter.detach().clone() for parameter in trainer.model.parameters()]
    with pytest.raises(RewardFunctionError) as raised:
        trainer.train()
    message = str(raised.value)
    assert message.startswith("Reward function 'recorded_reward' ")
    assert expected in message
    assert f"(prompt: {reward.seen[-1][5]!r})" in message
    assert trainer.state.global_step == 0
    assert all(torch.equal(before, after) for before, after in zip(initial, trainer.model.parameters()))


def test_wrong_number_of_rewards_is_reported_before_trl_sees_it(task, tmp_path):
    def short_reward(completions, answer, **kwargs):
        return toy_accuracy_reward(completions, answer)[:-1]

    trainer = toy_trainer(DrGRPOTrainer, toy_config(DrGRPOConfig, tmp_path), task, reward_funcs=[short_reward])
    with pytest.raises(RewardFunctionError, match=r"'short_reward' returned 15 rewards for 16 completions"):
        trainer.train()


def test_exception_in_reward_is_reraised_with_its_name_and_chained(task, tmp_path):
    original = KeyError("solution")

    def broken_reward(completions, **kwargs):
        raise original

    trainer = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path), task, reward_funcs=[broken_reward])
    expected = r"Reward function 'broken_reward' raised KeyError: 'solution'"
    with pytest.raises(RewardFunctionError, match=expected) as raised:
        trainer.train()
    assert raised.value.__cause__ is original


def test_async_reward_is_checked_too(task, tmp_path):
    async def async_judge(completions, **kwargs):
        return [-math.inf] + [0.0] * (len(completions) - 1)

    trainer = toy_trainer(DrGRPOTrainer, toy_config(DrGRPOConfig, tmp_path), task, reward_funcs=[async_judge])
    with pytest.raises(RewardFunctionError, match=r"'async_judge' returned -inf \(infinite\) for sample 0 of 16"):
        trainer.train()


def test_none_rewards_keep_trls_meaning_and_user_objects_stay_in_place(task, tmp_path):
    calls = []

    def partly_skipped(completions, answer, **kwargs):
        calls.append(len(completions))
        rewards = toy_accuracy_reward(completions, answer)
        return [None if index % 3 == 0 else reward for index, reward in enumerate(rewards)]

    config = toy_config(DAPOConfig, tmp_path, overlong_buffer_length=2)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[partly_skipped])
    trainer.train()
    assert trainer.state.global_step == 2 and calls
    # The guards exist only inside a reward computation: the trainer keeps the user's objects and TRL's names.
    assert trainer.reward_funcs[0] is partly_skipped
    assert is_soft_overlong_punishment(trainer.reward_funcs[1])
    assert isinstance(trainer.reward_funcs[1], SoftOverlongPunishment)
    assert trainer.reward_func_names == ["partly_skipped", "soft_overlong_punishment"]
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        assert math.isfinite(entry["loss"]) and math.isfinite(entry["rewards/partly_skipped/mean"])
        assert "rewards/soft_overlong_punishment/mean" in entry
