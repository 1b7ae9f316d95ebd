"""Predicting degenerate groups from a per-prompt posterior of the pass rate (after MoPPS, arXiv 2507.04632); pure
functions and numpy arrays, tested without a model. docs/dynamic_sampling.md, "The posterior predictor", explains it.

Each dataset row keeps a Beta posterior of `q`, the probability that one completion of that prompt is right, above a
U-shaped prior `Beta(PRIOR, PRIOR)`. A group of `G` completions is informative with probability
`1 - q**G - (1 - q)**G`. Before a prompt is generated, `q` is drawn from its posterior (Thompson sampling) and the
prompt is generated when, at that pass rate, its group is more likely informative than not; otherwise only with a
small floor probability. Evidence fades toward the prior by `decay ** steps_since_its_last_update` (wrong answers
`RIGHT_MEMORY_FACTOR` times faster than right ones), applied lazily from the row's last update. Three arrays of
`len(dataset)` (12 bytes a row): the two counts and the step of the last update.
"""

from dataclasses import dataclass, field

import numpy as np
import torch

from ...dynamic_sampling.selection import all_correct_groups

# A drawn pass rate whose group is at least this likely to be informative gets the prompt generated.
GENERATE_THRESHOLD = 0.5
# Right answers are remembered this many times longer than wrong ones: a policy that improves turns always-wrong
# prompts into learnable ones far more often than it unlearns prompts it solves.
RIGHT_MEMORY_FACTOR = 8
# Both Beta parameters of the prior: far below 1, a U-shaped prior (see the module docstring).
PRIOR = 0.05
# Evidence older than this many half-lives is below 1 / 2**30 of its weight; capping the exponent avoids underflow.
_MAX_HALF_LIVES = 30


def half_life_decay(half_life_steps: float) -> float:
    """The per-step factor by which evidence fades so that it halves every `half_life_steps` steps."""
    if not half_life_steps > 0:
        raise ValueError(f"half_life_decay: half_life_steps must be > 0, got {half_life_steps}.")
    return float(0.5 ** (1.0 / half_life_steps))


def posterior_decays(memory_epochs: float, dataset_rows: int, batch_groups: int) -> tuple[float, float]:
    """`(decay_right, decay_wrong)` for a wrong answer's evidence to halve every `memory_epochs` passes over a
    dataset of `dataset_rows` prompts at `batch_groups` prompts a step, a right answer's `RIGHT_MEMORY_FACTOR` times
    slower."""
    wrong_half_life = memory_epochs * max(dataset_rows, batch_groups) / max(1, batch_groups)
    return half_life_decay(RIGHT_MEMORY_FACTOR * wrong_half_life), half_life_decay(wrong_half_life)


def _fade(decay: float, elapsed: np.ndarray) -> np.ndarray:
    if decay == 1.0:
        return np.ones(len(elapsed))
    return decay ** np.minimum(elapsed, _MAX_HALF_LIVES * np.log(2) / -np.log(decay))


def informative_probability(q, num_generations: int):
    """Probability that `num_generations` completions, each right with probability `q`, do not all agree."""
    q = np.asarray(q, dtype=np.float64)
    return 1.0 - q**num_generations - (1.0 - q) ** num_generations


def completion_successes(scores: torch.Tensor, informative: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion (`scores`: `(groups, n)`), whether it counts as right and whether it was scored.

    A degenerate group is all right or all wrong by `selection.all_correct_groups`. In an informative group a
    completion counts as right when its score is above the middle of the group's range, which is the right/wrong
    split for binary rewards and keeps any metric's informative group mixed. Unscored completions (NaN) count as
    neither.
    """
    scores = scores.to(torch.float64)
    scored = ~torch.isnan(scores)
    filled_high = torch.where(scored, scores, torch.full_like(scores, -torch.inf))
    filled_low = torch.where(scored, scores, torch.full_like(scores, torch.inf))
    middle = (filled_high.amax(dim=1) + filled_low.amin(dim=1)) / 2
    above_middle = (scores > middle[:, None]) & scored
    common_positive = all_correct_groups(scores)[:, None] & scored
    return torch.where(informative[:, None], above_middle, common_positive), scored


def group_successes(scores: torch.Tensor, informative: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the completions counted as right and the completions scored (`completion_successes`)."""
    right, scored = completion_successes(scores, informative)
    return right.sum(dim=1).numpy().astype(np.float64), scored.sum(dim=1).numpy().astype(np.float64)


@dataclass
class PassRatePosterior:
    """Per dataset row, a Beta posterior of the pass rate: `right` and `wrong` are its parameters above the prior
    (evidence), `updated` the step of the row's last update (-1: never generated)."""

    size: int
    decay_right: float
    decay_wrong: float
    right: np.ndarray = field(init=False, repr=False)
    wrong: np.ndarray = field(init=False, repr=False)
    updated: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"PassRatePosterior: size must be >= 1, got {self.size}.")
        for name in ("decay_right", "decay_wrong"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"PassRatePosterior: {name} must be in (0, 1], got {getattr(self, name)}.")
        self.right = np.zeros(self.size, dtype=np.float32)
        self.wrong = np.zeros(self.size, dtype=np.float32)
        self.updated = np.full(self.size, -1, dtype=np.int32)

    def _faded(self, indices: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The factors by which the right and the wrong evidence of `indices` have faded since their last update."""
        elapsed = np.clip(step - self.updated[indices].astype(np.int64), 0, None)
        return _fade(self.decay_right, elapsed), _fade(self.decay_wrong, elapsed)

    def parameters(self, indices, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The Beta parameters of `indices` at `step`, prior included, with their evidence faded to that step."""
        indices = np.asarray(indices, dtype=np.int64)
        faded_right, faded_wrong = self._faded(indices, step)
        return PRIOR + self.right[indices] * faded_right, PRIOR + self.wrong[indices] * faded_wrong

    def record(self, indices, right, scored, step: int) -> None:
        """Adds each visit's `right` of `scored` completions, in visit order (a row may appear twice). Rows with
        index < 0 (unknown) or nothing scored leave the posterior as it was."""
        for index, hits, total in zip(np.asarray(indices).tolist(), np.asarray(right).tolist(),
                                      np.asarray(scored).tolist(), strict=True):  # fmt: skip
            if index < 0 or total <= 0:
                continue
            if not 0 <= index < self.size:
                raise IndexError(f"PassRatePosterior: row {index} is outside the dataset of {self.size} rows.")
            faded_right, faded_wrong = self._faded(np.array([index]), step)
            self.right[index] = self.right[index] * faded_right[0] + hits
            self.wrong[index] = self.wrong[index] * faded_wrong[0] + (total - hits)
            self.updated[index] = step

    def arrays(self) -> dict[str, np.ndarray]:
        return {"right": self.right, "wrong": self.wrong, "updated": self.updated}

    def load_arrays(self, arrays) -> None:
        loaded = {name: np.asarray(arrays[name]) for name in ("right", "wrong", "updated")}
        if any(values.shape != (self.size,) for values in loaded.values()):
            raise ValueError(
                f"PassRatePosterior: the checkpoint's history covers {loaded['right'].shape[0]} rows, this dataset "
                f"has {self.size}; resume with the same training dataset."
            )
        self.right = loaded["right"].astype(np.float32)
        self.wrong = loaded["wrong"].astype(np.float32)
        self.updated = loaded["updated"].astype(np.int32)


def thompson_generate_probabilities(
    posterior: PassRatePosterior, indices, step: int, num_generations: int, floor: float, rng: np.random.Generator
) -> np.ndarray:
    """Probability that each of `indices` is generated (Thompson sampling): a pass rate is drawn from the row's
    posterior and the row is generated when, at that pass rate, its group would more likely be informative than not
    (`GENERATE_THRESHOLD`); otherwise it is generated with probability `floor`. Rows never generated and unknown
    rows (index < 0) are always generated."""
    indices = np.asarray(indices, dtype=np.int64)
    probabilities = np.ones(len(indices), dtype=np.float64)
    known = indices >= 0
    seen = np.zeros(len(indices), dtype=bool)
    seen[known] = posterior.updated[indices[known]] >= 0
    if seen.any():
        alpha, beta = posterior.parameters(indices[seen], step)
        draws = rng.beta(alpha, beta)
        likely_informative = informative_probability(draws, num_generations) >= GENERATE_THRESHOLD
        probabilities[seen] = np.where(likely_informative, 1.0, floor)
    return probabilities
