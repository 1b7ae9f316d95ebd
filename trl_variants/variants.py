"""The three trainers by command name (`dapo`, `dr-grpo`, `grpo`), each with its config class: what the command line
launches and what the real-model example trains, kept below both so that neither imports the other. A trainer class
is imported on first use: parsing a command line, and its `--help`, need the config class only, and a trainer
brings everything `GRPOTrainer` imports (datasets, pandas, the reward libraries), about a second of CPU time."""

import importlib
from dataclasses import dataclass

from trl import GRPOConfig

from .dapo.config import DAPOConfig
from .dr_grpo.config import DrGRPOConfig


@dataclass(frozen=True)
class Variant:
    command: str
    config_class: type[GRPOConfig]
    trainer_path: str  # "module:Class"
    description: str

    @property
    def trainer_class(self) -> type:
        """The trainer class (a `GRPOTrainer` subclass, or `GRPOTrainer`), imported on first use."""
        module, _, name = self.trainer_path.partition(":")
        return getattr(importlib.import_module(module), name)


VARIANTS: dict[str, Variant] = {
    variant.command: variant
    for variant in (
        Variant(
            "dapo", DAPOConfig, "trl_variants.dapo.trainer:DAPOTrainer",
            "DAPO: clip-higher, dynamic sampling, token-level loss, overlong shaping",
        ),
        Variant(
            "dr-grpo", DrGRPOConfig, "trl_variants.dr_grpo.trainer:DrGRPOTrainer",
            "Dr.GRPO: GRPO without its length and std biases",
        ),
        Variant("grpo", GRPOConfig, "trl:GRPOTrainer", "TRL's plain GRPO, as a baseline through the same launcher"),
    )
}
