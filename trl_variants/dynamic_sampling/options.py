"""Which of dynamic sampling's two savings a run uses: prompt skipping and carrying surplus groups.

The real-model study (docs/results/real_model_study_method.md, a non-inferiority test against DAPO as published)
decides both defaults, and a test holds them to its decision. Skipping with carrying was not shown non-inferior,
so `skip_degenerate_prompts` defaults to `False`; carrying alone was, so `dynamic_sampling_carry_surplus` defaults
to `None`, "on wherever it is supported". A default must never refuse a run that the explicit setting `False` would
train, so where carrying cannot work the default resolves to off and says why; only an explicit `True` is refused
there.
"""

from dataclasses import dataclass

from .carry import carry_layout_problem

CARRY_VLM_PROBLEM = (
    "vision-language models are not supported: a carried row's generating log-probs are recorded without its images"
)


@dataclass(frozen=True)
class SamplingOptions:
    """The resolved options; `carry_off_reason` says why the default left carrying off (`None` when it did not)."""

    skip_degenerate_prompts: bool
    carry_surplus: bool
    carry_off_reason: str | None = None


def resolve_sampling_options(
    dynamic_sampling: bool,
    skip_degenerate_prompts: bool,
    carry_surplus: bool | None,
    gradient_accumulation_steps: int,
    steps_per_generation: int,
    num_iterations: int,
    is_vision_language_model: bool,
) -> SamplingOptions:
    """Resolves carrying's `None` default; raises `ValueError` for an explicit `True` that cannot work.

    Without dynamic sampling both options are off (an explicit `True` for skipping is refused by `DAPOConfig`).
    """
    if not dynamic_sampling:
        return SamplingOptions(skip_degenerate_prompts=False, carry_surplus=False)
    problem = carry_layout_problem(gradient_accumulation_steps, steps_per_generation, num_iterations)
    if problem is None and is_vision_language_model:
        problem = CARRY_VLM_PROBLEM
    if carry_surplus is None:
        return SamplingOptions(skip_degenerate_prompts, carry_surplus=problem is None, carry_off_reason=problem)
    if carry_surplus and problem is not None:
        raise ValueError(f"dynamic_sampling_carry_surplus=True is not allowed: {problem}.")
    return SamplingOptions(skip_degenerate_prompts, carry_surplus=carry_surplus)
