"""Resolving `skip_degenerate_prompts` (a plain bool, off by default) and `dynamic_sampling_carry_surplus`, whose
`None` default means on wherever supported and never refuses a run; an explicit `True` is refused where it cannot
work."""

import pytest

from trl_variants.dynamic_sampling.options import SamplingOptions, resolve_sampling_options

ALIGNED = {"gradient_accumulation_steps": 4, "steps_per_generation": 2, "num_iterations": 2}
MISALIGNED = {"gradient_accumulation_steps": 2, "steps_per_generation": 4, "num_iterations": 1}


def resolve(skip=False, carry=None, dynamic_sampling=True, vlm=False, layout=ALIGNED):
    return resolve_sampling_options(dynamic_sampling, skip, carry, **layout, is_vision_language_model=vlm)


def test_defaults_carry_where_supported_and_do_not_skip():
    assert resolve() == SamplingOptions(skip_degenerate_prompts=False, carry_surplus=True, carry_off_reason=None)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"vlm": True}, "vision-language models are not supported"),
        ({"layout": MISALIGNED}, "gradient_accumulation_steps (2) is not a multiple of steps_per_generation * "
         "num_iterations (4 * 1 = 4)"),
    ],
)  # fmt: skip
def test_default_carrying_turns_off_where_unsupported_and_says_why(kwargs, reason):
    options = resolve(skip=True, **kwargs)
    assert options.skip_degenerate_prompts and not options.carry_surplus  # skipping does not depend on carrying
    assert options.carry_off_reason.startswith(reason)


@pytest.mark.parametrize("kwargs", [{"vlm": True}, {"layout": MISALIGNED}])
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
    assert resolve(dynamic_sampling=False, vlm=True, layout=MISALIGNED) == SamplingOptions(False, False)
