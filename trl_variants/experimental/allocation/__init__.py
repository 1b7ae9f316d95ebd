"""Budgeted allocation of completions across prompts (issue 56; experimental, `dynamic_sampling_allocation=True`, no
study behind it yet): the pure decisions in `decisions.py`, the dynamic sampler's allocation mode in `allocator.py`.
The decisions' inputs `alpha`, `beta` are a prompt's posterior from earlier steps,
`PassRatePosterior.parameters(indices, step)` of `experimental/prompt_skipping/posterior.py`, without this step's
counts; `right`, `wrong` are this step's counts so far."""

from .allocator import Allocator
from .decisions import (
    allocate_round,
    balanced_group,
    beta_power_mean,
    completion_outcomes,
    finished_prompts,
    mixed_probability,
    plan_scores,
    unseen_prompt_score,
)

__all__ = ["Allocator", "allocate_round", "balanced_group", "beta_power_mean", "completion_outcomes",
           "finished_prompts", "mixed_probability", "plan_scores", "unseen_prompt_score"]
