"""Reward functions: DAPO's rule-based accuracy reward and soft overlong punishment; `registry` maps the names the
command line accepts to reward functions, and `names` lists those names without importing them."""

import importlib

__all__ = ["SoftOverlongPunishment", "dapo_accuracy_reward", "is_soft_overlong_punishment", "soft_overlong_punishment"]

# Imported on first use (PEP 562), so that the command line can check reward names (`names`) before torch loads.
_LAZY_EXPORTS = {
    "dapo_accuracy_reward": ".accuracy",
    "SoftOverlongPunishment": ".overlong",
    "is_soft_overlong_punishment": ".overlong",
    "soft_overlong_punishment": ".overlong",
}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        value = getattr(importlib.import_module(_LAZY_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_EXPORTS])
