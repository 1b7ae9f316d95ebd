"""Reward functions: DAPO's rule-based accuracy reward and soft overlong punishment; `registry` maps the names the
command line accepts to reward functions, and `names` lists those names without importing them."""

from .._lazy import lazy_attributes

# Imported on first use (PEP 562), so that the command line can check reward names (`names`) before torch loads.
_LAZY_EXPORTS = {
    "dapo_accuracy_reward": ".accuracy",
    "SoftOverlongPunishment": ".overlong",
    "is_soft_overlong_punishment": ".overlong",
    "soft_overlong_punishment": ".overlong",
}
__all__ = sorted(_LAZY_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY_EXPORTS)
