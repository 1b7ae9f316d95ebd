"""Which of dynamic sampling's two savings a run uses: prompt skipping and carrying surplus groups.

Both `skip_degenerate_prompts` and `dynamic_sampling_carry_surplus` default to `None`, "on wherever it is
supported". On the real model they cut the generation dynamic sampling spends per trained row; whether they cost
accuracy against DAPO as published is what the real-model study decides (docs/results/real_model_study_method.md,
a non-inferiority test), and a test holds these defaults to its decision once every seed is in. A default
must never refuse a run that the explicit setting `False` would train, so where an option cannot work the default
resolves to off and says why; only an explicit `True` is refused there.
"""

from dataclasses import dataclass

from .carry import carry_alignment_problem

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
    skip_degenerate_prompts: bool | None,
    carry_surplus: bool | None,
    gradient_accumulation_steps: int,
    steps_per_generation: int,
    num_iterations: int,
    is_vision_language_model: bool,
) -> SamplingOptions:
    """Resolves the two `None` defaults; raises `ValueError` for an explicit `True` that cannot work.

    Without dynamic sampling both options are off (an explicit `True` for skipping is refused by `DAPOConfig`).
    """
    if not dynamic_sampling:
        return SamplingOptions(skip_degenerate_prompts=False, carry_surplus=False)
    skip = True if skip_degenerate_prompts is None else skip_degenerate_prompts
    problem = carry_alignment_problem(gradient_accumulation_steps, steps_per_generation, num_iterations)
    if problem is None and is_vision_language_model:
        problem = CARRY_VLM_PROBLEM
    if carry_surplus is None:
        return SamplingOptions(skip, carry_surplus=problem is None, carry_off_reason=problem)
    if carry_surplus and problem is not None:
        raise ValueError(f"dynamic_sampling_carry_surplus=True is not allowed: {problem}.")
    return SamplingOptions(skip, carry_surplus=carry_surplus)
