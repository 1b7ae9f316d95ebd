"""DAPO and Dr.GRPO as drop-in replacements for TRL's `GRPOTrainer`."""

from ._compat import check_trl

check_trl()

from ._lazy import lazy_attributes

__version__ = "0.1.0"

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
__all__ = sorted(_LAZY_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY_EXPORTS)
