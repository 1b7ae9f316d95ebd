"""DAPO's soft overlong punishment: a linear penalty over the last tokens before `max_completion_length`.

It follows TRL's reward-function protocol: keyword argument `completion_ids`, one float per completion.
"""

from collections.abc import Callable

from trl.rewards import get_soft_overlong_punishment
from trl.rewards.other_rewards import _SoftOverlongPunishment as _TRLSoftOverlongPunishment


class SoftOverlongPunishment:
    """DAPO's soft overlong punishment (equation 13) scaled by a penalty factor.

    0 for completions of at most `max_completion_length - buffer_length` tokens, falling linearly to
    `-penalty_factor` at `max_completion_length` tokens, and `-penalty_factor` beyond. Built on TRL's
    `get_soft_overlong_punishment`, whose shape matches the paper with a factor of 1. A class rather than a
    closure so it pickles (TRL's async rollout workers pickle reward functions).
    """

    __name__ = "soft_overlong_punishment"

    def __init__(self, max_completion_length: int, buffer_length: int, penalty_factor: float = 1.0):
        if not 0 < buffer_length < max_completion_length:
            raise ValueError(
                f"SoftOverlongPunishment: buffer_length={buffer_length} must satisfy "
                f"0 < buffer_length < max_completion_length ({max_completion_length})."
            )
        if penalty_factor < 0:
            raise ValueError(f"SoftOverlongPunishment: penalty_factor={penalty_factor} must be >= 0.")
        self.max_completion_length = max_completion_length
        self.buffer_length = buffer_length
        self.penalty_factor = penalty_factor
        self._unit_punishment = get_soft_overlong_punishment(max_completion_length, buffer_length)

    def __call__(self, completion_ids: list[list[int]], **kwargs) -> list[float]:
        return [self.penalty_factor * value for value in self._unit_punishment(completion_ids)]


def soft_overlong_punishment(
    max_completion_length: int, buffer_length: int, penalty_factor: float = 1.0
) -> Callable[..., list[float]]:
    """Returns the soft overlong punishment reward for these lengths; see `SoftOverlongPunishment`."""
    return SoftOverlongPunishment(max_completion_length, buffer_length, penalty_factor)


def is_soft_overlong_punishment(reward_func) -> bool:
    """True for this package's punishment and for TRL's own, so neither is mistaken for the accuracy reward or
    added twice."""
    return isinstance(reward_func, (SoftOverlongPunishment, _TRLSoftOverlongPunishment))
