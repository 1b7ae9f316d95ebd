"""Checks on every reward-function call: the output must be one finite number (or `None`) per completion.

TRL turns a reward into a float tensor without looking at it, so a NaN or an infinity flows into the advantages and
from there into the weights, and a string or a list of the wrong length fails deep inside TRL with a message that
does not say which reward function is at fault. The guards here check each call and describe the first problem:
the function, the value, the sample's index and its prompt.

A guard does not raise. It records the problem and returns NaN rewards of the right length, so TRL's gather of the
rewards still runs on every process; the trainer then exchanges one flag between processes and every process raises
together (see `ReliabilityMixin._calculate_rewards`). Raising on the failing process alone would leave the others
waiting in that gather until the collective times out.
"""

import math
import numbers
from dataclasses import dataclass

import torch
from torch import nn
from trl.trainer.utils import is_async_callable

PROMPT_PREVIEW_CHARS = 80


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something that cannot be trained on."""


@dataclass
class RewardFailure:
    """The first problem found in one reward-function call on this process."""

    message: str
    cause: BaseException | None = None


def shorten_prompt(prompt, limit: int = PROMPT_PREVIEW_CHARS) -> str:
    """A one-line preview of a prompt; conversational prompts show their last message."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content", prompt[-1])
    text = prompt if isinstance(prompt, str) else repr(prompt)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_number(value) -> float | None:
    """The value as a float, or `None` when it is not a real number (strings, lists, complex numbers)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.item())
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def as_reward_list(output) -> list | None:
    """The rewards as a list (a generator or a 1-D tensor is materialised), or `None` when `output` is not a
    sequence of values at all (a number, a string, a dict, a 0-d tensor)."""
    if isinstance(output, (str, bytes, dict)) or not hasattr(output, "__iter__"):
        return None
    try:
        return list(output)
    except TypeError:  # iterating a 0-d tensor or array
        return None


def find_reward_problem(name: str, rewards: list | None, output, prompts: list) -> str | None:
    """Describes the first problem in a reward function's output for `prompts`, or returns `None` if it is valid.

    `rewards` is `as_reward_list(output)`. Valid: one entry per prompt, each a finite real number or `None`
    (which TRL skips).
    """
    expected = len(prompts)
    allowed = f"a list of {expected} finite numbers (one per completion, None to skip a completion)"
    if rewards is None:
        returned = f"{_preview(output)} of type {type(output).__name__}"
        return f"Reward function '{name}' returned {returned}; expected {allowed}."
    if len(rewards) != expected:
        returned = f"{len(rewards)} rewards for {expected} completions"
        return f"Reward function '{name}' returned {returned}; expected {allowed}."
    for index, value in enumerate(rewards):
        if value is None:
            continue
        number = _as_number(value)
        if number is None:
            problem = f"the non-numeric value {_preview(value)} (type {type(value).__name__})"
        elif math.isnan(number):
            problem = "NaN"
        elif math.isinf(number):
            problem = f"{number} (infinite)"
        else:
            continue
        return (
            f"Reward function '{name}' returned {problem} for sample {index} of {expected} "
            f"(prompt: {shorten_prompt(prompts[index])!r}); expected {allowed}."
        )
    return None


def _preview(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GuardedRewardFunction:
    """Calls a synchronous reward function and checks its output; see the module docstring."""

    def __init__(self, reward_func, name: str, failures: list[RewardFailure]):
        self.wrapped = reward_func
        self.__name__ = name
        self._failures = failures

    def __call__(self, *args, **kwargs):
        try:
            output = self.wrapped(*args, **kwargs)
        except Exception as error:
            return self._fail(self._raised_message(error), kwargs, error)
        return self._checked(output, kwargs)

    def _raised_message(self, error: Exception) -> str:
        return f"Reward function '{self.__name__}' raised {type(error).__name__}: {error}"

    def _checked(self, output, kwargs):
        rewards = as_reward_list(output)
        problem = find_reward_problem(self.__name__, rewards, output, kwargs.get("prompts") or [])
        if problem is None:
            return rewards
        return self._fail(problem, kwargs)

    def _fail(self, message: str, kwargs, cause: BaseException | None = None) -> list[float]:
        self._failures.append(RewardFailure(message, cause))
        # NaN rewards of the right length let TRL finish the call, and its gather, on every process.
        return [math.nan] * len(kwargs.get("prompts") or [])


class AsyncGuardedRewardFunction(GuardedRewardFunction):
    """The guard for `async` reward functions; TRL awaits it on its event loop like the function it wraps."""

    async def __call__(self, *args, **kwargs):
        try:
            output = await self.wrapped(*args, **kwargs)
        except Exception as error:
            return self._fail(self._raised_message(error), kwargs, error)
        return self._checked(output, kwargs)


def guard_reward_funcs(reward_funcs: list, names: list[str], failures: list[RewardFailure]) -> list:
    """Wraps every plain callable in `reward_funcs` in a guard that records problems into `failures`.

    Reward models (`nn.Module`) are left as they are: TRL runs them itself and takes one logit per completion.
    """
    guarded = []
    for reward_func, name in zip(reward_funcs, names, strict=True):
        if isinstance(reward_func, nn.Module):
            guarded.append(reward_func)
        elif is_async_callable(reward_func):
            guarded.append(AsyncGuardedRewardFunction(reward_func, name, failures))
        else:
            guarded.append(GuardedRewardFunction(reward_func, name, failures))
    return guarded


def failure_error(failures: list[RewardFailure], failed_ranks: list[int], rank: int) -> RewardFunctionError:
    """The error this process raises once any process recorded a reward failure."""
    if failures:
        first = failures[0]
        message = first.message
        if len(failures) > 1:
            message += f" ({len(failures) - 1} more reward problem(s) in the same batch.)"
        if len(failed_ranks) > 1 or failed_ranks != [rank]:
            message += f" [process {rank}; reward problems on processes {failed_ranks}]"
        error = RewardFunctionError(message)
        error.__cause__ = first.cause
        return error
    return RewardFunctionError(
        f"Stopping because a reward function failed on process(es) {failed_ranks}; that process's error above "
        "names the function, the value and the sample. Every process stops so that none waits forever for the "
        "others."
    )
