"""`DrGRPOTrainer`: GRPO without its length and difficulty biases (Dr.GRPO)."""

from trl import GRPOTrainer

from ..model_card import DR_GRPO_PAPER, TRL_VARIANTS_TAG, VariantModelCardMixin
from ..reliability.trainer import ReliabilityMixin
from ..variant_args import variant_args
from ..vllm_cpu import keep_linear_weights_reloadable
from .config import DrGRPOConfig


class DrGRPOTrainer(ReliabilityMixin, VariantModelCardMixin, GRPOTrainer):
    """
    Trainer for Dr.GRPO (https://huggingface.co/papers/2503.20783).

    Relative to [`~trl.GRPOTrainer`] the loss and advantages are untouched: the algorithm lives entirely in
    [`DrGRPOConfig`], which fixes `loss_type="dr_grpo"` (token sum over the constant
    `max_completion_length`, removing the length bias) and `scale_rewards="none"` (advantage = reward - group
    mean, removing the std-division difficulty bias). What this class adds:

    - `args` must be a `DrGRPOConfig` (a plain `GRPOConfig` could silently keep either bias); `args=None` builds
      one named after the model.
    - The model card is tagged `trl-variants` and `dr-grpo`, cites the paper and lists the settings.
    - `_calculate_rewards` and `train` (from `ReliabilityMixin`): every reward call is checked and a failure stops
      all processes together; datasets are checked at construction; resumes skip half-written checkpoints.

    It accepts exactly the arguments of `GRPOTrainer`.
    """

    _tag_names = ["trl", TRL_VARIANTS_TAG, "dr-grpo"]
    _name = "Dr. GRPO"
    _paper = DR_GRPO_PAPER

    def __init__(self, model, reward_funcs=None, args=None, *positional, **kwargs):
        args = variant_args(
            "DrGRPOTrainer",
            DrGRPOConfig,
            model,
            args,
            run_suffix="Dr-GRPO",
            why='A GRPOConfig with loss_type="dr_grpo" still divides advantages by the group std unless '
            'scale_rewards="none"; DrGRPOConfig sets both.',
        )
        keep_linear_weights_reloadable(args)
        super().__init__(model, reward_funcs, args, *positional, **kwargs)
        self._setup_reliability_checks()

    def _variant_settings(self) -> dict[str, object]:
        return {
            "loss_type": self.args.loss_type,
            "scale_rewards": self.args.scale_rewards,
            "loss normaliser (max_completion_length)": self.args.max_completion_length,
            "epsilon": self.args.epsilon,
            "beta": self.args.beta,
            "num_generations": self.args.num_generations,
        }
