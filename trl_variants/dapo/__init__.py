"""DAPO (https://huggingface.co/papers/2503.14476): `DAPOConfig` and `DAPOTrainer`."""

from .._lazy import lazy_attributes

# Imported on first use, so that the config (all the command line's parsing and `--help` need) loads without the
# trainer and everything `GRPOTrainer` imports.
_LAZY_EXPORTS = {"DAPOConfig": ".config", "DAPOTrainer": ".trainer"}
__all__ = sorted(_LAZY_EXPORTS)

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY_EXPORTS)
