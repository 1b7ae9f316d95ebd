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
    mean, removing the std-division difficulty bias). This class overrides these methods, each calling `super()`
    (the mixin that defines it in brackets):

    - `__init__`: `args` must be a `DrGRPOConfig` (a plain `GRPOConfig` could silently keep either bias);
      `args=None` builds one named after the model. The datasets are checked after TRL's construction.
    - `_get_train_sampler` (`ReliabilityMixin`): TRL's `RepeatSampler`, made to draw on resume the prompts an
      uninterrupted run would, and cycled when the dataset has fewer prompts than one generation batch.
    - `_calculate_rewards` (`ReliabilityMixin`): every reward call is checked, and a failure on any process stops
      all processes together.
    - `train` (`ReliabilityMixin`): resumes from the latest complete checkpoint and refuses a half-written one.
    - `create_model_card` (`VariantModelCardMixin`): the card is tagged `trl-variants` and `dr-grpo`, cites the
      paper, lists the settings, and links no base model or dataset that is not on the Hub.

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
        self.setup_reliability_checks()

    def _variant_settings(self) -> dict[str, object]:
        return {
            "loss_type": self.args.loss_type,
            "scale_rewards": self.args.scale_rewards,
            "loss normaliser (max_completion_length)": self.args.max_completion_length,
            "epsilon": self.args.epsilon,
            "beta": self.args.beta,
            "num_generations": self.args.num_generations,
        }
