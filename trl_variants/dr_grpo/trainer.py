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

    The loss and advantages are TRL's: the algorithm lives entirely in [`DrGRPOConfig`] (`loss_type="dr_grpo"`,
    `scale_rewards="none"`). It accepts exactly the arguments of `GRPOTrainer` and overrides these methods, each
    calling `super()` (the mixin that defines it in brackets):

    - `__init__`: `args` must be a `DrGRPOConfig` (a plain `GRPOConfig` could silently keep either bias);
      `args=None` builds one named after the model. The datasets are checked after TRL's construction.
    - `_get_train_sampler` (`ReliabilityMixin`): TRL's `RepeatSampler`, drawing on resume what an uninterrupted run
      would, and cycled when the dataset has fewer prompts than one generation batch.
    - `_calculate_rewards` (`ReliabilityMixin`): every reward call is checked; a failure stops all processes together.
    - `train` (`ReliabilityMixin`): resumes from the latest complete checkpoint and refuses a half-written one.
    - `create_model_card` (`VariantModelCardMixin`): tags `trl-variants` and `dr-grpo`, the paper, the settings, and
      no link to a base model or dataset that is not on the Hub.
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
