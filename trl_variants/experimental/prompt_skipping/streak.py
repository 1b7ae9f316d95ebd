"""Skipping prompts predicted degenerate before generating them (after GRESO, https://arxiv.org/abs/2506.02177); pure
pieces, tested without a model. docs/dynamic_sampling.md, "The streak predictor", explains it.

`PromptHistory` keeps, per dataset row, how many consecutive visits were degenerate of one kind (all correct or all
wrong); `explore_probabilities` generates a prompt with a streak of `k` with probability `max(p ** k, floor)`;
`pick_prompts` walks candidates (the dataloader's, then refill draws) through a skip rule, with a bounded number of
draws; `adapt_explore_probability` moves `p` toward a target share of degenerate groups of its kind.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ...dynamic_sampling.selection import all_correct_groups

# Outcome codes of a generated group, as stored in `PromptHistory.kind`.
INFORMATIVE, ALL_CORRECT, ALL_WRONG, UNSCORED = 0, 1, 2, -1
# Streaks saturate here instead of wrapping round; by then `p ** k` is far below any useful floor.
MAX_STREAK = np.iinfo(np.uint8).max
# Explore probability of both kinds before any adaptation: a prompt degenerate once is generated half the time.
INITIAL_EXPLORE_PROBABILITY = 0.5
# Most candidates considered per prompt wanted before the rest are generated without passing the rule: enough to
# find `floor`-probability prompts often, small enough that a step never stalls on index draws.
MAX_CANDIDATES_PER_PROMPT = 16


def group_outcomes(scores: torch.Tensor, informative: torch.Tensor) -> np.ndarray:
    """The outcome code of each group: `INFORMATIVE`, `ALL_CORRECT`, `ALL_WRONG` or `UNSCORED`.

    A degenerate group is all correct or all wrong by `selection.all_correct_groups`, the rule of the
    `all_correct_frac`/`all_wrong_frac` metrics. A group with no scored completion is `UNSCORED`.
    """
    scores = scores.to(torch.float64)
    outcomes = torch.where(all_correct_groups(scores), ALL_CORRECT, ALL_WRONG)
    outcomes = torch.where(informative, INFORMATIVE, outcomes)
    outcomes = torch.where(torch.isnan(scores).all(dim=1) & ~informative, UNSCORED, outcomes)
    return outcomes.numpy().astype(np.int8)


@dataclass
class PromptHistory:
    """Per dataset row: `streak`, the consecutive degenerate visits of one kind (0: never, or informative last),
    and `kind`, that kind (`ALL_CORRECT` or `ALL_WRONG`; `INFORMATIVE` when the streak is 0)."""

    size: int
    streak: np.ndarray = field(init=False, repr=False)
    kind: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"PromptHistory: size must be >= 1, got {self.size}.")
        self.streak = np.zeros(self.size, dtype=np.uint8)
        self.kind = np.zeros(self.size, dtype=np.int8)

    def record(self, indices, outcomes) -> None:
        """Updates the history with one outcome per visited row, in visit order (a row may appear twice).

        An informative visit ends the streak. A degenerate visit of the streak's kind lengthens it; one of the
        other kind starts a new streak of 1, since a prompt that flipped from all correct to all wrong is changing
        and its old streak says little. Unscored visits (every reward returned None) and unknown rows (index < 0)
        leave the history as it was.
        """
        for index, outcome in zip(np.asarray(indices).tolist(), np.asarray(outcomes).tolist(), strict=True):
            if index < 0 or outcome == UNSCORED:
                continue
            if not 0 <= index < self.size:
                raise IndexError(f"PromptHistory: row {index} is outside the dataset of {self.size} rows.")
            if outcome == INFORMATIVE:
                self.streak[index], self.kind[index] = 0, INFORMATIVE
            elif outcome == self.kind[index]:
                self.streak[index] = min(int(self.streak[index]) + 1, MAX_STREAK)
            else:
                self.streak[index], self.kind[index] = 1, outcome

    def arrays(self) -> dict[str, np.ndarray]:
        return {"streak": self.streak, "kind": self.kind}

    def load_arrays(self, arrays) -> None:
        streak, kind = np.asarray(arrays["streak"]), np.asarray(arrays["kind"])
        if streak.shape != (self.size,) or kind.shape != (self.size,):
            raise ValueError(
                f"PromptHistory: the checkpoint's history covers {streak.shape[0]} rows, this dataset has {self.size}; "
                "resume with the same training dataset."
            )
        self.streak, self.kind = streak.astype(np.uint8), kind.astype(np.int8)


def explore_probabilities(history: PromptHistory, indices, p_easy: float, p_hard: float, floor: float) -> np.ndarray:
    """Probability that each of `indices` is generated: 1 without a streak, else `max(p ** streak, floor)`.

    Unknown rows (index < 0) are always generated.
    """
    indices = np.asarray(indices, dtype=np.int64)
    known = indices >= 0
    streak = np.zeros(len(indices), dtype=np.float64)
    kind = np.zeros(len(indices), dtype=np.int8)
    streak[known] = history.streak[indices[known]]
    kind[known] = history.kind[indices[known]]
    base = np.where(kind == ALL_CORRECT, p_easy, p_hard)
    return np.where(streak > 0, np.maximum(base**streak, floor), 1.0)


@dataclass
class PickedPrompts:
    """What `pick_prompts` decided: `kept` (in decision order, then `forced`) are generated, `skipped` are not.
    `candidates` marks, for each of `prompts`, whether it could have been skipped (every forced prompt could)."""

    kept: list[int]
    forced: list[int]
    skipped: list[int]
    kept_candidates: list[bool]

    @property
    def prompts(self) -> list[int]:
        return self.kept + self.forced

    @property
    def candidates(self) -> list[bool]:
        return self.kept_candidates + [True] * len(self.forced)


def pick_prompts(
    first: list[int],
    draw: Callable[[int], list[int]],
    needed: int,
    explore_probability: Callable[[list[int]], np.ndarray],
    rng: np.random.Generator,
) -> PickedPrompts:
    """Keeps `needed` prompts: `first` (the dataloader's) through the rule, then draws until enough are kept.

    At most `MAX_CANDIDATES_PER_PROMPT * needed` candidates are considered; when they are used up, the skipped
    candidates most likely to be informative (highest explore probability, earliest first) are generated anyway
    as `forced`, so the result has `needed` prompts and no step waits on a dataset that looks all degenerate. Only a
    `draw` that returns nothing (a stream with no unread prompt) ends the picking with fewer.
    """
    kept, kept_candidates, skipped, skipped_probability = [], [], [], []
    budget = MAX_CANDIDATES_PER_PROMPT * needed
    batch = list(first)[:needed]
    considered = 0
    while True:
        if not batch:
            wanted = min(needed - len(kept), budget - considered)
            if wanted <= 0:
                break
            batch = draw(wanted)
            if not batch:  # a stream with nothing unread left
                break
        probabilities = explore_probability(batch)
        explored = rng.random(len(batch)) < probabilities
        for index, probability, keep in zip(batch, probabilities.tolist(), explored.tolist(), strict=True):
            if keep:
                kept.append(index)
                kept_candidates.append(probability < 1.0)
            else:
                skipped.append(index)
                skipped_probability.append(probability)
        considered += len(batch)
        batch = []
    missing = needed - len(kept)
    # Stable sort on -probability: the highest explore probabilities first, ties in draw order.
    order = sorted(range(len(skipped)), key=lambda i: -skipped_probability[i])[: max(missing, 0)]
    forced = [skipped[i] for i in sorted(order)]
    chosen = set(order)
    return PickedPrompts(kept, forced, [index for i, index in enumerate(skipped) if i not in chosen], kept_candidates)


def adapt_explore_probability(p: float, observed_share: float, target_share: float, step: float, floor: float) -> float:
    """One adaptation step: below the target share of degenerate groups of its kind, `p` rises (skip less);
    above it, `p` falls (skip more); at the target it stays. The result stays in `[floor, 1]`."""
    if observed_share > target_share:
        p -= step
    elif observed_share < target_share:
        p += step
    return float(min(1.0, max(floor, p)))
