"""Reward functions: DAPO's rule-based accuracy reward and soft overlong punishment; `registry` maps the names the
command line accepts to reward functions."""

from .accuracy import dapo_accuracy_reward
from .overlong import (
    SoftOverlongPunishment,
    is_soft_overlong_punishment,
    soft_overlong_punishment,
)

__all__ = ["SoftOverlongPunishment", "dapo_accuracy_reward", "is_soft_overlong_punishment", "soft_overlong_punishment"]
