"""The table of allowed numeric ranges: the pure check, its messages, and its agreement with the config classes."""

import dataclasses
import math

import pytest
from trl import GRPOConfig, ModelConfig

from trl_variants import DAPOConfig, DrGRPOConfig
from trl_variants.cli.args import VariantScriptArguments
from trl_variants.reliability.field_ranges import FIELD_RANGES, Range, first_range_problem, range_problem

CPU = {"use_cpu": True, "bf16": False, "report_to": []}


@pytest.mark.parametrize(
    ("allowed", "inside", "outside"),
    [
        (Range(low=0), [0, 0.0, 1e-9, 5], [-1e-9, -1, math.nan, None, True, "1"]),
        (Range(low=0, low_inclusive=False), [1e-12, 3], [0, -1]),
        (Range(low=0.0, high=1.0, high_inclusive=False), [0, 0.5, 0.999], [1, 1.5, -0.1]),
        (Range(low=1, integer=True, also=(-1,)), [-1, 1, 7, 2.0], [0, -2, 1.5]),
        (Range(low=1, integer=True, optional=True), [None, 1], [0]),
    ],
)
def test_range_contains(allowed, inside, outside):
    assert all(allowed.contains(value) for value in inside)
    assert not any(allowed.contains(value) for value in outside)


def test_messages_name_the_field_the_value_and_the_range():
    assert range_problem("learning_rate", -1e-6) == "learning_rate=-1e-06 is not allowed; expected >= 0."
    assert range_problem("top_p", 0) == "top_p=0 is not allowed; expected a value with 0 < value <= 1."
    assert range_problem("max_steps", 0) == (
        "max_steps=0 is not allowed; expected an integer >= 1, or -1 (trains for num_train_epochs)."
    )
    assert range_problem("eval_steps", None) is None and range_problem("not_a_listed_field", -5) is None


def test_first_problem_is_reported_for_any_object_with_the_fields():
    class Values:
        temperature = 0.0
        learning_rate = 1e-6

    assert first_range_problem(Values()) == "temperature=0.0 is not allowed; expected > 0."


# The command line's own arguments (`--reasoning_gym_size`, ...) are checked by the same ranges.
CONFIG_CLASSES = (DAPOConfig, DrGRPOConfig, GRPOConfig, ModelConfig, VariantScriptArguments)


def test_every_listed_field_is_a_field_of_a_config_and_its_defaults_are_allowed():
    defaults = {}
    for config_class in CONFIG_CLASSES:
        for item in dataclasses.fields(config_class):
            if item.default is not dataclasses.MISSING:
                defaults.setdefault(item.name, []).append((config_class.__name__, item.default))
    assert not [name for name in FIELD_RANGES if name not in defaults], "a field name in FIELD_RANGES is misspelt"
    rejected_defaults = [
        (name, owner, default)
        for name in FIELD_RANGES
        for owner, default in defaults[name]
        if not FIELD_RANGES[name].contains(default)
    ]
    assert rejected_defaults == []


@pytest.mark.parametrize("config_class", [DAPOConfig, DrGRPOConfig])
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("learning_rate", -1e-6, "learning_rate=-1e-06 is not allowed; expected >= 0."),
        ("per_device_train_batch_size", 0, "per_device_train_batch_size=0 is not allowed; expected an integer >= 1."),
        ("temperature", 0.0, "temperature=0.0 is not allowed; expected > 0."),
        ("top_p", 1.5, "top_p=1.5 is not allowed; expected a value with 0 < value <= 1."),
        ("num_iterations", 0, "num_iterations=0 is not allowed; expected an integer >= 1."),
        ("max_completion_length", 0, "max_completion_length=0 is not allowed; expected an integer >= 1, or None."),
        ("adam_beta2", 1.0, "adam_beta2=1.0 is not allowed; expected a value with 0 <= value < 1."),
        ("warmup_steps", math.nan, "warmup_steps=nan is not allowed; expected >= 0"),
    ],
)
def test_python_configs_reject_an_out_of_range_value_in_post_init(config_class, field, value, message, tmp_path):
    with pytest.raises(ValueError) as error:
        config_class(str(tmp_path / "out"), **CPU, **{field: value})
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_dapo_fields_are_checked_whether_or_not_their_feature_is_on(tmp_path):
    # A recipe that turns skipping on later must not meet a range error only then.
    with pytest.raises(ValueError, match=r"^skip_probability_step=0 is not allowed"):
        DAPOConfig(str(tmp_path), **CPU, skip_degenerate_prompts=False, skip_probability_step=0)
