"""The three trainers by command name (`dapo`, `dr-grpo`, `grpo`), each with its config class: what the command line
launches and what the real-model example trains, kept below both so that neither imports the other."""

from dataclasses import dataclass

from trl import GRPOConfig, GRPOTrainer

from .dapo.config import DAPOConfig
from .dapo.trainer import DAPOTrainer
from .dr_grpo.config import DrGRPOConfig
from .dr_grpo.trainer import DrGRPOTrainer


@dataclass(frozen=True)
class Variant:
    command: str
    config_class: type[GRPOConfig]
    trainer_class: type[GRPOTrainer]
    description: str


VARIANTS: dict[str, Variant] = {
    variant.command: variant
    for variant in (
        Variant(
            "dapo", DAPOConfig, DAPOTrainer, "DAPO: clip-higher, dynamic sampling, token-level loss, overlong shaping"
        ),
        Variant("dr-grpo", DrGRPOConfig, DrGRPOTrainer, "Dr.GRPO: GRPO without its length and std biases"),
        Variant("grpo", GRPOConfig, GRPOTrainer, "TRL's plain GRPO, as a baseline through the same launcher"),
    )
}
