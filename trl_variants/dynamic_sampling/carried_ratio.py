"""The policy ratio of carried rows, logged per optimizer step (`dynamic_sampling/carried_ratio_mean`, `_max`).

A carried group is trained one generation batch after it was generated (`carry`), so its ratio pi_theta / pi_old
moves further from 1 than a fresh row's; these metrics show how far, to tell a carried group's staleness apart from
other causes when a run turns unstable. The ratio is per token, `exp(log pi_theta - log pi_old)` with the loss's
own log-probs and the old ones the loss uses (the generating policy's), over the carried rows' loss tokens, whatever
`importance_sampling_level` TRL then applies.
"""

import torch

CARRIED_RATIO_MEAN = "dynamic_sampling/carried_ratio_mean"
CARRIED_RATIO_MAX = "dynamic_sampling/carried_ratio_max"


def carried_ratio_sums(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, carried: torch.Tensor
) -> torch.Tensor:
    """`[sum, count, max]` of the per-token ratio over the carried rows' masked tokens (`max` is -inf when there are
    none). `logps`, `old_logps`, `mask`: `(B, T)`; `carried`: `(B,)` bool."""
    tokens = mask.bool() & carried.unsqueeze(1)
    ratios = torch.exp(logps.float() - old_logps.float())[tokens]
    largest = ratios.max() if ratios.numel() else torch.tensor(-torch.inf, device=ratios.device)
    return torch.stack([ratios.sum(), torch.tensor(float(ratios.numel()), device=ratios.device), largest])


class CarriedRatioWindow:
    """Sums of the carried rows' ratio over one optimizer step's micro-batches, on this process."""

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None

    def add(self, logps, old_logps, mask, carried) -> None:
        sums = carried_ratio_sums(logps, old_logps, mask, carried)
        if self.sums is None:
            self.sums = sums
        else:
            self.sums = torch.stack([self.sums[0] + sums[0], self.sums[1] + sums[1], torch.maximum(self.sums[2], sums[2])])

    def close(self, accelerator) -> dict[str, float] | None:
        """The step's metrics over every process, and an empty window; `None` when no micro-batch of the step had
        carried rows. Every process must call it at the same steps: whether a micro-batch holds the carried-rows key
        is the same on every process (`scoring_with_generating_logps`), so `sums` is set on all or none."""
        if self.sums is None:
            return None
        gathered = accelerator.gather(self.sums.unsqueeze(0)).view(-1, 3)
        self.sums = None
        total, count, largest = gathered[:, 0].sum().item(), gathered[:, 1].sum().item(), gathered[:, 2].max().item()
        if count == 0:
            return None
        return {CARRIED_RATIO_MEAN: total / count, CARRIED_RATIO_MAX: largest}
