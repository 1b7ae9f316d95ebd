"""The reward over every group generated for a step, which TRL's own `reward` no longer shows under dynamic
sampling: TRL measures the trained batch, which holds informative (mixed) groups only. Each process sums its own
completions' rewards; the sums are reduced once per step with the other sampling metrics."""

import torch

# Logged beside TRL's `reward`; docs/metrics.md says which of the two to read.
ALL_GROUPS_REWARD_METRIC = "dynamic_sampling/reward_all_groups"


def total_reward_sum(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> tuple[float, int]:
    """Sum over completions of the weighted sum of their rewards, and the number of completions: their quotient is
    `GRPOTrainer`'s `reward` (a reward function's `None`, NaN, counts as 0 in a completion's sum)."""
    totals = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return totals.sum().item(), totals.numel()
