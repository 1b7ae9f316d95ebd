"""Dr.GRPO (https://huggingface.co/papers/2503.20783): `DrGRPOConfig` and `DrGRPOTrainer`."""

from .config import DrGRPOConfig
from .trainer import DrGRPOTrainer

__all__ = ["DrGRPOConfig", "DrGRPOTrainer"]
