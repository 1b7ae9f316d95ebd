"""The reward over every group generated for a step, which TRL's own `reward` no longer shows under dynamic
sampling: TRL measures the trained batch, which holds informative (mixed) groups only."""

import torch

# Logged beside TRL's `reward`; docs/metrics.md says which of the two to read.
ALL_GROUPS_REWARD_METRIC = "dynamic_sampling/reward_all_groups"


def mean_total_reward(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> float:
    """Mean over completions of the weighted sum of their rewards, computed as `GRPOTrainer` computes `reward`: a
    reward function's `None` (NaN) counts as 0 in a completion's sum."""
    totals = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return torch.nanmean(totals).item()
