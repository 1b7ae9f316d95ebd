"""DAPO (https://huggingface.co/papers/2503.14476): `DAPOConfig` and `DAPOTrainer`."""

from .config import DAPOConfig
from .trainer import DAPOTrainer

__all__ = ["DAPOConfig", "DAPOTrainer"]
