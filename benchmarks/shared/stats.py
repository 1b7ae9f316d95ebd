"""Pure statistics the benchmarks share: means over seeds with their t-intervals, and degenerate-group counts. No
trainers: everything here is unit-tested on hand-made numbers."""

import math
import statistics
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its two-sided 95% Student-t interval; `low`/`high` are NaN with fewer than 2 values."""

    mean: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        return not math.isnan(self.low) and (self.low > 0 or self.high < 0)

    def text(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.mean:.{digits}f} (n={self.n})"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def t_quantile(probability: float, degrees_of_freedom: int) -> float:
    """Student-t quantile from torch's density integrated on a fine grid (within 1e-3 of the tables for 1..30
    degrees of freedom); scipy is not a dependency of the package."""
    t = torch.distributions.StudentT(torch.tensor(float(degrees_of_freedom), dtype=torch.float64))
    grid = torch.linspace(0.0, 200.0, 400_001, dtype=torch.float64)
    density = t.log_prob(grid).exp()
    cdf = 0.5 + torch.cumulative_trapezoid(density, grid)
    index = int(torch.searchsorted(cdf, torch.tensor(probability, dtype=torch.float64)))
    return float(grid[index + 1])


def t_interval(values, confidence: float = 0.95) -> Interval:
    """Mean and t-interval of `values` (NaNs dropped): mean ± t_{n-1} * sd / sqrt(n)."""
    values = [float(value) for value in values if value is not None and not math.isnan(value)]
    if not values:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan, len(values))
    half_width = t_quantile((1 + confidence) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half_width, mean + half_width, len(values))


@dataclass(frozen=True)
class GroupOutcomes:
    """Degenerate groups among the groups of one reward call, and the completions that formed no whole group."""

    groups: int
    all_correct: int
    all_wrong: int
    ungrouped: int = 0


def group_spans(prompts: list, group_size: int) -> tuple[list[tuple[int, int]], int]:
    """The groups of one reward call as (start, stop) positions, and the number of completions in no group. TRL and
    dynamic sampling's rounds lay a prompt's `group_size` completions out contiguously, so every run of consecutive
    completions of one prompt whose length is a multiple of `group_size` is split into groups; a run of another
    length (the allocation mode's continuation rounds, which give a prompt a few more completions at a time) forms
    none, and its completions are counted as ungrouped rather than miscounted as groups."""
    spans, ungrouped, start = [], 0, 0
    for stop in range(1, len(prompts) + 1):
        if stop < len(prompts) and str(prompts[stop]) == str(prompts[start]):
            continue
        if (stop - start) % group_size:
            ungrouped += stop - start
        else:
            spans += [(at, at + group_size) for at in range(start, stop, group_size)]
        start = stop
    return spans, ungrouped


def count_group_outcomes(prompts: list, correct: list[bool], group_size: int) -> GroupOutcomes:
    """The groups of one reward call (`group_spans`) and those whose completions are all correct or all wrong."""
    if len(prompts) != len(correct):
        raise ValueError(f"count_group_outcomes: {len(prompts)} prompts for {len(correct)} completions.")
    spans, ungrouped = group_spans(prompts, group_size)
    all_correct = sum(all(correct[start:stop]) for start, stop in spans)
    all_wrong = sum(not any(correct[start:stop]) for start, stop in spans)
    return GroupOutcomes(len(spans), all_correct, all_wrong, ungrouped)
