"""Reward functions the command line can name, and the dataset columns each one reads.

`trl-variants dapo --reward_funcs dapo_accuracy think_format_reward` looks names up here. A dotted import path
(`my_package.rewards.my_reward`) is accepted too, as TRL's own `trl grpo` does; its required columns are read
from its signature. The soft overlong punishment is deliberately not a name: `DAPOConfig.overlong_buffer_length`
adds it with the right lengths, and a second copy would punish twice.
"""

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from trl.rewards import accuracy_reward, reasoning_accuracy_reward, think_format_reward

from .accuracy import dapo_accuracy_reward
from .names import REGISTERED_NAMES, accepted_names_text, reward_name_problem

# Keyword arguments TRL itself passes to every reward function; any other named parameter is a dataset column.
TRL_REWARD_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


class RewardLookupError(ValueError):
    """A reward name that is neither registered nor importable, or a dataset that cannot feed a reward."""


@dataclass(frozen=True)
class RewardSpec:
    """A registered reward function and what it needs from the dataset.

    `columns`: with `needs_every_column=False` the reward reads its gold answer from whichever of these columns
    exists; with `True` it needs each of them. An empty tuple means it reads no column. `chat_only`: the reward
    reads completions as chat messages, so prompts must be conversational.
    """

    name: str
    func: Callable
    columns: tuple[str, ...]
    chat_only: bool
    summary: str
    needs_every_column: bool = False


REWARD_REGISTRY: dict[str, RewardSpec] = {
    spec.name: spec
    for spec in (
        RewardSpec(
            "dapo_accuracy",
            dapo_accuracy_reward,
            ("solution", "answer"),
            chat_only=False,
            summary="DAPO's +1/-1 rule reward on the last 'Answer:' line or \\boxed{} (column solution or answer)",
        ),
        RewardSpec(
            "accuracy_reward",
            accuracy_reward,
            ("solution",),
            chat_only=True,
            summary="TRL's math-verify accuracy, 1/0 (column solution; conversational prompts)",
        ),
        RewardSpec(
            "reasoning_accuracy_reward",
            reasoning_accuracy_reward,
            ("solution",),
            chat_only=True,
            summary="TRL's accuracy on the text after the reasoning block (column solution; conversational prompts)",
        ),
        RewardSpec(
            "think_format_reward",
            think_format_reward,
            (),
            chat_only=True,
            summary="TRL's <think>...</think> format check, 1/0 (conversational prompts)",
        ),
    )
}


assert tuple(REWARD_REGISTRY) == REGISTERED_NAMES, "names.REGISTERED_NAMES must list the registry's names"


def resolve_reward(name: str) -> RewardSpec:
    """The spec for a registered name or a dotted import path; `RewardLookupError` names what is accepted."""
    if name in REWARD_REGISTRY:
        return REWARD_REGISTRY[name]
    problem = reward_name_problem(name)
    if problem is not None:
        raise RewardLookupError(problem)
    return _import_reward(name)


def _import_reward(dotted_path: str) -> RewardSpec:
    module_path, attribute = dotted_path.rsplit(".", 1)
    # Like `trl grpo`, a module next to the recipe (the working directory) can be named without installing it.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(module_path), attribute)
    except (ImportError, AttributeError) as error:
        raise RewardLookupError(
            f"reward_funcs: cannot import {dotted_path!r} ({error}); accepted: {accepted_names_text()}."
        ) from None
    if not callable(func):
        raise RewardLookupError(f"reward_funcs: {dotted_path!r} is a {type(func).__name__}, not a function.")
    columns = tuple(required_reward_columns(func))
    return RewardSpec(dotted_path, func, columns, chat_only=False, summary="imported", needs_every_column=True)


def required_reward_columns(reward_func) -> list[str]:
    """Dataset columns `reward_func` cannot run without: its named parameters with no default that TRL does not
    pass itself. Parameters with a default, `*args` and `**kwargs` are optional by construction."""
    try:
        signature = inspect.signature(reward_func)
    except (TypeError, ValueError):  # builtins and some C callables have no inspectable signature
        return []
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind in named and parameter.default is inspect.Parameter.empty and name not in TRL_REWARD_KWARGS
    ]


def check_dataset_feeds(specs: list[RewardSpec], column_names: list[str], conversational: bool) -> None:
    """Raises `RewardLookupError` when the dataset lacks a column a reward reads, or has plain-text prompts for a
    reward that reads chat messages."""
    for spec in specs:
        if spec.needs_every_column:
            missing = [column for column in spec.columns if column not in column_names]
            if missing:
                raise RewardLookupError(
                    f"reward {spec.name!r} needs dataset column(s) {missing}; the dataset has {column_names}. "
                    "Add the column(s) to the dataset, or give the reward function's parameter(s) a default."
                )
        elif spec.columns and not set(spec.columns) & set(column_names):
            wanted = " or ".join(repr(column) for column in spec.columns)
            raise RewardLookupError(
                f"reward {spec.name!r} needs the gold answers in dataset column {wanted}; the dataset has "
                f"{column_names}. Point --solution_column at the column that holds them."
            )
        if spec.chat_only and not conversational:
            raise RewardLookupError(
                f"reward {spec.name!r} reads completions as chat messages, but the dataset's prompts are plain "
                "text; set --system_prompt (which makes prompts conversational), use a conversational dataset, or "
                "use dapo_accuracy."
            )
