"""Dr.GRPO (https://huggingface.co/papers/2503.20783): `DrGRPOConfig` and `DrGRPOTrainer`."""

from .._lazy import lazy_attributes

# Imported on first use, as in `trl_variants.dapo`: the config loads without the trainer.
_LAZY_EXPORTS = {"DrGRPOConfig": ".config", "DrGRPOTrainer": ".trainer"}
__all__ = sorted(_LAZY_EXPORTS)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY_EXPORTS)
