"""`DrGRPOConfig`: `GRPOConfig` set to Dr.GRPO, with both of its bias removals."""

from dataclasses import dataclass, field

from trl import GRPOConfig

from ..reliability.config_checks import check_common_fields, require


@dataclass
class DrGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`DrGRPOTrainer`] (Dr.GRPO, https://huggingface.co/papers/2503.20783): every
    [`~trl.GRPOConfig`] field, with the two settings that make GRPO unbiased fixed: `loss_type="dr_grpo"` (no
    per-completion length normalisation) and `scale_rewards="none"` (no std division, which TRL's
    `loss_type="dr_grpo"` alone keeps); `beta` defaults to 0.0, as in the paper's runs. docs/config_reference.md,
    "DrGRPOConfig", has the table.

    It overrides `GRPOConfig`'s `__post_init__` to check, before TRL's own checks, the type and range of every
    numeric field, `loss_type` and `scale_rewards` (each error names the field, the value and what is allowed).
    """

    loss_type: str = field(
        default="dr_grpo",
        metadata={"help": 'Must be "dr_grpo": token sum over a constant normaliser (max_completion_length).'},
    )
    scale_rewards: str = field(
        default="none", metadata={"help": 'Must be "none": advantage = reward - group mean, without the std division.'}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; Dr.GRPO's runs use 0.0. Range: >= 0."})

    def __post_init__(self):
        check_common_fields(self)
        require(
            self.loss_type == "dr_grpo",
            "loss_type",
            self.loss_type,
            '"dr_grpo" (Dr.GRPO removes the per-completion length normalisation)',
        )
        # TRL also accepts the booleans True/False for scale_rewards; False means "none".
        require(
            self.scale_rewards in ("none", False),
            "scale_rewards",
            self.scale_rewards,
            '"none" (Dr.GRPO removes the std division; "group" or "batch" would bring it back)',
        )
        super().__post_init__()
