"""DAPO and Dr.GRPO as drop-in replacements for TRL's `GRPOTrainer`."""

from ._compat import check_trl_version

check_trl_version()

import importlib

__version__ = "0.1.0"

__all__ = [
    "DAPOConfig",
    "DAPOTrainer",
    "DrGRPOConfig",
    "DrGRPOTrainer",
    "dapo_accuracy_reward",
    "soft_overlong_punishment",
]

# The trainers import torch and TRL, which takes seconds; they are imported on first use (PEP 562), so that
# `trl-variants --help` and the command line's light paths start at once. `from trl_variants import X` still works.
_LAZY_EXPORTS = {
    "DAPOConfig": ".dapo",
    "DAPOTrainer": ".dapo",
    "DrGRPOConfig": ".dr_grpo",
    "DrGRPOTrainer": ".dr_grpo",
    "dapo_accuracy_reward": ".rewards",
    "soft_overlong_punishment": ".rewards",
}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        value = getattr(importlib.import_module(_LAZY_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_EXPORTS])
