"""Checks shared by the variant configs. Every error names the field, the value and what is allowed."""

import dataclasses
import functools
import numbers
import types
import typing

from .field_ranges import check_field_ranges


def require(condition: bool, field_name: str, value, allowed: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}={value!r} is not allowed; expected {allowed}.")


# Fields the package no longer has, each with the one line that answers it (in a config, a recipe or a flag), where
# the dataclass's own error would say only that the keyword is unexpected.
REMOVED_FIELDS = {
    "dynamic_sampling_allocation": "dynamic_sampling_allocation was removed: the experimental allocation mode left "
    "the package after its study did not support it; its record, with the commit whose code ran the study, is "
    "docs/results/allocation_study/README.md.",
}


def check_common_fields(config) -> None:
    """Checks that hold for every GRPO-family config, before TRL's own `__post_init__` runs: types, the range of
    every numeric field (`field_ranges.FIELD_RANGES`), then the rules that relate two fields."""
    check_field_types(config)
    check_field_ranges(config)
    if config.epsilon_high is not None:
        require(
            config.epsilon_high >= config.epsilon,
            "epsilon_high",
            config.epsilon_high,
            f"a value >= epsilon ({config.epsilon}); clip-higher widens the upper range, never narrows it",
        )
    # TRL allows None (no limit) for the baseline; the variants' losses and overlong shaping need a length.
    require(
        config.max_completion_length is not None,
        "max_completion_length",
        config.max_completion_length,
        "an integer >= 1",
    )


def check_field_types(config) -> None:
    """Raises `TypeError` naming the field, the value, its type and the expected type, for every numeric field (the
    package's, TRL's and transformers') and every boolean field the variant config declares. Without it,
    `num_generations="8"` fails deep in TRL or transformers with a message that names no field, and
    `skip_degenerate_prompts="no"` would silently be true."""
    for name, expected, optional in _checked_fields(type(config)):
        value = getattr(config, name)
        if value is None and optional:
            continue
        if not _matches(value, expected):
            allowed = _TYPE_NAMES[expected] + (" or None" if optional else "")
            raise TypeError(f"{name}={value!r} has type {type(value).__name__}; expected {allowed}.")


_TYPE_NAMES = {int: "an integer", float: "a number (int or float)", bool: "a bool (True or False)"}


def _matches(value, expected: type) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # True is an int to Python, never a count or a rate to a config
        return False
    return isinstance(value, numbers.Integral if expected is int else numbers.Real)


@functools.cache
def _checked_fields(config_class: type) -> tuple[tuple[str, type, bool], ...]:
    hints = typing.get_type_hints(config_class)
    own = set()
    for klass in config_class.__mro__:
        if klass.__module__.startswith("trl_variants"):
            own |= set(vars(klass).get("__annotations__", {}))
    checked = []
    for item in dataclasses.fields(config_class):
        if not item.init:
            continue
        expected, optional = _simple_type(hints[item.name])
        if expected in (int, float) or (expected is bool and item.name in own):
            checked.append((item.name, expected, optional))
    return tuple(checked)


def _simple_type(hint) -> tuple[type | None, bool]:
    """(`int`, `float` or `bool`, whether None is allowed) for `T` and `T | None`; (None, False) for anything else."""
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        arguments = [argument for argument in typing.get_args(hint) if argument is not type(None)]
        optional = len(arguments) < len(typing.get_args(hint))
        if len(arguments) != 1:
            return None, False
        hint = arguments[0]
    return (hint, optional) if hint in (int, float, bool) else (None, False)
