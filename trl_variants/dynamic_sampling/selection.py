"""The arithmetic of DAPO's dynamic sampling, free of any trainer state so it can be tested on its own.

A *group* is the `num_generations` completions of one prompt. It is *degenerate* when all its scores are equal
(all right or all wrong): its group-relative advantages are zero and it carries no gradient. Dynamic sampling
trains only on *informative* groups and generates more prompts until the batch is full of them.
"""

import math
from dataclasses import dataclass, field

import torch

# A round asks for this many more groups than the pass rate predicts, so that one refill usually suffices.
REFILL_MARGIN = 1.2
# No round generates more than this many times the batch's number of groups, whatever the pass rate.
MAX_ROUND_SIZE_FACTOR = 4


def informative_group_mask(scores: torch.Tensor, tolerance: float) -> torch.Tensor:
    """True for each group (row of `scores`, shape `(num_groups, num_generations)`) whose scores differ.

    A group is degenerate when `max - min <= tolerance`; comparing the spread with a tolerance rather than the
    std with exactly 0 keeps float noise (1.0 against 0.99999994) from passing for a real difference. NaN scores
    (a reward that returned `None`) are ignored; a group with fewer than two scored completions is degenerate.
    """
    if scores.dim() != 2:
        raise ValueError(f"informative_group_mask: scores must be 2-D (groups, generations), got {tuple(scores.shape)}.")
    scored = ~torch.isnan(scores)
    highest = torch.where(scored, scores, torch.full_like(scores, -math.inf)).amax(dim=1)
    lowest = torch.where(scored, scores, torch.full_like(scores, math.inf)).amin(dim=1)
    return (scored.sum(dim=1) >= 2) & ((highest - lowest) > tolerance)


# Consecutive steps without an informative group after which a run is warned, once, that its reward gives no signal.
NO_SIGNAL_STEPS = 3


def no_signal_warning(steps: int, reward_values: dict[str, list]) -> str:
    """The warning for a run whose last `steps` steps found no informative group, with the distinct values each
    reward function returned in the latest step (`None` for a row it did not score)."""
    seen = "; ".join(
        f"{name}: {sorted({value for value in values if value is not None})[:6]}"
        + (f" and None for {sum(value is None for value in values)} of {len(values)} rows" if None in values else "")
        for name, values in reward_values.items()
    )
    return (
        f"Dynamic sampling found no informative group in {steps} consecutive steps: within every group the rewards "
        f"were equal, so these steps trained with zero advantage (loss 0) while generating extra rounds. Rewards "
        f"seen in the latest step: {seen}. Check that the reward functions score the completions (a reward that "
        "returns a constant, or None, for every completion gives nothing to learn), that max_completion_length lets "
        "the model finish an answer, and that the task is neither too easy nor too hard for the model."
    )


def degenerate_outcomes(scores: torch.Tensor, informative: torch.Tensor) -> tuple[int, int]:
    """Counts degenerate groups that were all correct (common score > 0) and all wrong (common score <= 0).

    The sign convention fits both +1/-1 rewards (DAPO) and 1/0 rewards; a group with no scored completion
    counts as neither.
    """
    degenerate_scores = scores[~informative]
    if degenerate_scores.numel() == 0:
        return 0, 0
    group_score = torch.nanmean(degenerate_scores, dim=1)
    scored = ~torch.isnan(group_score)
    return int((group_score[scored] > 0).sum()), int((group_score[scored] <= 0).sum())


def round_up_to_multiple(count: int, granularity: int) -> int:
    return -(-count // granularity) * granularity


def groups_to_request(
    missing_groups: int, pass_rate: float | None, batch_groups: int, granularity: int
) -> int:
    """How many new groups to generate for `missing_groups` informative ones at the estimated `pass_rate`.

    `None` (nothing observed yet) asks for exactly what is missing; a rate of 0 asks for the cap. The request is
    `ceil(missing / pass_rate * REFILL_MARGIN)`, rounded up to `granularity` (the number of processes, so every
    process gets the same number of whole groups) and capped at `MAX_ROUND_SIZE_FACTOR * batch_groups`.
    """
    if missing_groups <= 0:
        return 0
    cap = max(granularity, (MAX_ROUND_SIZE_FACTOR * batch_groups) // granularity * granularity)
    if pass_rate is None:
        wanted = missing_groups
    elif pass_rate <= 0:
        wanted = cap
    else:
        wanted = math.ceil(missing_groups / pass_rate * REFILL_MARGIN)
    return min(cap, round_up_to_multiple(wanted, granularity))


def first_round_extra_groups(
    batch_groups: int, pass_rate: float | None, granularity: int
) -> int:
    """Groups to generate beside the dataloader's own in the first round, from earlier steps' pass rate.

    Sizing the first round from what earlier steps observed means most steps fill their batch without a refill.
    """
    if pass_rate is None or pass_rate >= 1.0:
        return 0
    expected_total = groups_to_request(batch_groups, pass_rate, batch_groups, granularity)
    return max(0, expected_total - batch_groups) // granularity * granularity


@dataclass
class GroupSelection:
    """Which groups, by index in generation order, form the trained batch."""

    kept: list[int]
    filled: list[int]

    @property
    def indices(self) -> list[int]:
        return self.kept + self.filled


def select_groups(informative: list[bool], batch_groups: int, fill: bool) -> GroupSelection:
    """The first `batch_groups` informative groups in generation order; surplus ones are dropped.

    When there are too few and `fill` is set, the batch is completed with the earliest degenerate groups, which
    carry no signal on the sampling metric but keep the batch's shape.
    """
    kept = [i for i, flag in enumerate(informative) if flag][:batch_groups]
    filled: list[int] = []
    if len(kept) < batch_groups and fill:
        filled = [i for i, flag in enumerate(informative) if not flag][: batch_groups - len(kept)]
    return GroupSelection(kept=kept, filled=filled)


@dataclass
class PassRateTracker:
    """Running estimate of the share of informative groups, used to size the next step's first round, and the
    number of consecutive steps that found none (`steps_without_signal`)."""

    smoothing: float = 0.5
    estimate: float | None = None
    steps_without_signal: int = 0

    def update(self, informative: int, generated: int) -> None:
        if generated <= 0:
            return
        self.steps_without_signal = 0 if informative else self.steps_without_signal + 1
        observed = informative / generated
        if self.estimate is None:
            self.estimate = observed
        else:
            self.estimate = self.smoothing * self.estimate + (1 - self.smoothing) * observed


@dataclass
class RefillSampler:
    """Draws dataset indices for refill rounds: a fresh seeded permutation each pass over the dataset.

    It is independent of the trainer's dataloader, so drawing refills changes neither the step and epoch
    accounting nor the learning-rate schedule, and it is identical on every process for the same seed.
    """

    dataset_size: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self):
        if self.dataset_size < 1:
            raise ValueError(f"RefillSampler: dataset_size must be >= 1, got {self.dataset_size}.")

    def _permutation(self) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def draw(self, count: int) -> list[int]:
        drawn = []
        while len(drawn) < count:
            if not self._order:
                self._order = self._permutation()
            if self.position >= self.dataset_size:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation()
            take = min(count - len(drawn), self.dataset_size - self.position)
            drawn.extend(self._order[self.position : self.position + take])
            self.position += take
        return drawn

    def state_dict(self) -> dict[str, int]:
        return {"dataset_size": self.dataset_size, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if "dataset_size" not in state:
            raise ValueError(
                "RefillSampler: the checkpoint's refill state is a streaming dataset's, but train_dataset is map-style; "
                "resume with the training dataset the checkpoint was saved with."
            )
        if state["dataset_size"] != self.dataset_size:
            raise ValueError(
                f"RefillSampler: the checkpoint's dataset has {state['dataset_size']} rows, this one has "
                f"{self.dataset_size}; resume with the same training dataset."
            )
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]
        self._order = []
