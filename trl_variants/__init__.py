"""DAPO and Dr.GRPO as drop-in replacements for TRL's `GRPOTrainer`."""

from ._compat import check_trl_version

check_trl_version()

from .dapo import DAPOConfig, DAPOTrainer  # noqa: E402
from .dr_grpo import DrGRPOConfig, DrGRPOTrainer  # noqa: E402
from .rewards import dapo_accuracy_reward, soft_overlong_punishment  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "DAPOConfig",
    "DAPOTrainer",
    "DrGRPOConfig",
    "DrGRPOTrainer",
    "dapo_accuracy_reward",
    "soft_overlong_punishment",
]
