"""Budgeted allocation of completions across prompts (issue 56; not wired into the sampler yet, no study behind it):
the pure decisions in `decisions.py`. Its inputs `alpha`, `beta` are a prompt's posterior from earlier steps,
`PassRatePosterior.parameters(indices, step)` of `experimental/prompt_skipping/posterior.py`, without this step's
counts; `right`, `wrong` are this step's counts so far."""

from .decisions import (
    allocate_round,
    balanced_group,
    beta_power_mean,
    finished_prompts,
    mixed_probability,
    plan_scores,
    unseen_prompt_score,
)

__all__ = ["allocate_round", "balanced_group", "beta_power_mean", "finished_prompts", "mixed_probability", "plan_scores",
           "unseen_prompt_score"]
