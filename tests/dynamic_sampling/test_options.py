"""Resolving `skip_degenerate_prompts` (a plain bool, off by default) and `dynamic_sampling_carry_surplus`, whose
`None` default means on wherever supported and never refuses a run; an explicit `True` is refused where it cannot
work."""

import pytest

from trl_variants import DAPOConfig
from trl_variants.dynamic_sampling.selection import SamplingOptions, resolve_sampling_options

ALIGNED = {"gradient_accumulation_steps": 4, "steps_per_generation": 2, "num_iterations": 2}
# Four optimizer updates per generation batch: where clip-higher acts (the layout of real-model study 3).
SEVERAL_UPDATES = {"gradient_accumulation_steps": 1, "steps_per_generation": 4, "num_iterations": 1}
# Neither of gradient_accumulation_steps and steps_per_generation * num_iterations divides the other.
IRREGULAR = {"gradient_accumulation_steps": 2, "steps_per_generation": 3, "num_iterations": 1}


def resolve(skip=False, carry=None, dynamic_sampling=True, vlm=False, layout=ALIGNED):
    return resolve_sampling_options(dynamic_sampling, skip, carry, **layout, is_vision_language_model=vlm)


@pytest.mark.parametrize("layout", [ALIGNED, SEVERAL_UPDATES], ids=["aligned", "several-updates"])
def test_defaults_carry_where_supported_and_do_not_skip(layout):
    assert resolve(layout=layout) == SamplingOptions(
        skip_degenerate_prompts=False, carry_surplus=True, carry_off_reason=None
    )


def test_dapo_config_defaults_carry_where_a_generation_batch_trains_several_updates(tmp_path):
    config = DAPOConfig(str(tmp_path), use_cpu=True, report_to=[], **SEVERAL_UPDATES)
    resolved = resolve_sampling_options(
        config.dynamic_sampling, config.skip_degenerate_prompts, config.dynamic_sampling_carry_surplus,
        config.gradient_accumulation_steps, config.steps_per_generation, config.num_iterations,
        is_vision_language_model=False,
    )  # fmt: skip
    assert resolved == SamplingOptions(skip_degenerate_prompts=False, carry_surplus=True, carry_off_reason=None)
    assert DAPOConfig(str(tmp_path), use_cpu=True, report_to=[], dynamic_sampling_carry_surplus=True, **SEVERAL_UPDATES)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"vlm": True}, "vision-language models are not supported"),
        ({"layout": IRREGULAR}, "neither of gradient_accumulation_steps (2) and steps_per_generation * "
         "num_iterations (3 * 1 = 3) divides the other"),
    ],
)  # fmt: skip
def test_default_carrying_turns_off_where_unsupported_and_says_why(kwargs, reason):
    options = resolve(skip=True, **kwargs)
    assert options.skip_degenerate_prompts and not options.carry_surplus  # skipping does not depend on carrying
    assert options.carry_off_reason.startswith(reason)


@pytest.mark.parametrize("kwargs", [{"vlm": True}, {"layout": IRREGULAR}])
def test_explicit_carrying_is_refused_where_unsupported(kwargs):
    with pytest.raises(ValueError, match=r"^dynamic_sampling_carry_surplus=True is not allowed: "):
        resolve(carry=True, **kwargs)
    assert resolve(carry=False, **kwargs) == SamplingOptions(False, False)


def test_explicit_settings_are_kept():
    assert resolve(skip=False, carry=False) == SamplingOptions(False, False)  # DAPO as published
    assert resolve(skip=True, carry=False) == SamplingOptions(True, False)
    assert resolve(skip=False, carry=True) == SamplingOptions(False, True)


def test_without_dynamic_sampling_both_are_off():
    assert resolve(dynamic_sampling=False) == SamplingOptions(False, False)
    assert resolve(dynamic_sampling=False, vlm=True, layout=IRREGULAR) == SamplingOptions(False, False)
