"""`DAPOConfig`: `GRPOConfig` with the DAPO paper's recipe as defaults, plus soft overlong punishment and dynamic
sampling fields."""

from dataclasses import dataclass, field

from transformers.utils import logging
from trl import GRPOConfig

from ..dynamic_sampling.selection import ROW_NORMALISED_LOSS_TYPES, carry_layout_problem, dynamic_sampling_mode
from ..reliability.config_checks import REMOVED_FIELDS, check_common_fields, require

logger = logging.get_logger(__name__)

# Every objective TRL 1.16's `GRPOTrainer._compute_loss` implements; "dapo" is DAPO's own and the default.
TRL_LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo")


@dataclass
class DAPOConfig(GRPOConfig):
    r"""
    Configuration for [`DAPOTrainer`]: every [`~trl.GRPOConfig`] field, with DAPO's defaults
    (https://huggingface.co/papers/2503.14476: `epsilon_high=0.28`, `loss_type="dapo"`, `beta=0.0`, no overlong
    filtering), plus the fields of the soft overlong punishment (`overlong_*`), dynamic sampling
    (`dynamic_sampling*`, `max_rows_per_generate_call`) and prompt skipping (`skip_*`). Each field's help gives its
    meaning and range; docs/config_reference.md has the full table, with the evidence behind each default.

    Relative to `GRPOConfig` it overrides `__post_init__`: before TRL's own checks, the type and range of every
    numeric field and the rules between fields (each error names the field, the value and what is allowed); after
    them, the rules on fields TRL resolves (`max_rows_per_generate_call` against vLLM and continuous batching,
    `dynamic_sampling_carry_surplus=True` against `steps_per_generation`). And `__new__`, only to refuse a removed
    field (`dynamic_sampling_allocation`) with one line naming its record.
    """

    epsilon: float = field(default=0.2, metadata={"help": "Lower clip range epsilon_low. Range: >= 0."})
    epsilon_high: float | None = field(
        default=0.28, metadata={"help": "Upper clip range epsilon_high (DAPO's clip-higher). Range: >= epsilon."}
    )
    loss_type: str = field(
        default="dapo",
        metadata={
            "help": 'Policy objective: "dapo" (DAPO\'s token mean over the whole generation batch) or any other TRL '
            'objective: "grpo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo". Dynamic sampling and overlong '
            "shaping compose with each."
        },
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient. DAPO uses no KL term (0.0). Range: >= 0."})
    scale_rewards: str = field(
        default="group", metadata={"help": 'Advantage scaling: "group" divides by the group std, as DAPO does.'}
    )
    mask_truncated_completions: bool = field(
        default=False,
        metadata={
            "help": "Overlong filtering: exclude truncated completions from the loss. Off by default because the "
            "paper's reference run uses the soft overlong punishment instead, which needs truncated samples in "
            "the loss to act."
        },
    )
    overlong_buffer_length: int | None = field(
        default=None,
        metadata={
            "help": "Soft overlong punishment buffer L_cache in tokens. When set, a punishment reward falls "
            "linearly from 0 at max_completion_length - L_cache to -overlong_penalty_factor at "
            "max_completion_length. Range: 0 < value < max_completion_length; None disables it."
        },
    )
    overlong_penalty_factor: float = field(
        default=1.0,
        metadata={"help": "Magnitude of the soft overlong punishment at max_completion_length. Range: >= 0."},
    )
    # `str`, as TRL types its `scale_rewards`, so that the command line passes "drop" through; True and False are
    # accepted too (`__post_init__` stores "regenerate", "drop" or False).
    dynamic_sampling: str = field(
        default="regenerate",
        metadata={
            "help": 'What to do with groups whose scores are all equal (flat: no signal). "regenerate" or True '
            "(default, DAPO as published): generate more prompts until the batch is full of informative groups. "
            '"drop": generate one batch per step, as GRPOTrainer does, and leave flat groups out of the loss, its '
            "normaliser and the KL term. False: train every group, as GRPOTrainer does. The dynamic_sampling_* "
            'fields below other than _metric and _tolerance apply to "regenerate" only.'
        },
    )
    dynamic_sampling_metric: str = field(
        default="accuracy",
        metadata={
            "help": 'Score that decides whether a group is degenerate: "accuracy" (the first reward function that is '
            'not the soft overlong punishment), "total" (the weighted sum of all rewards) or the name of one reward '
            "function."
        },
    )
    dynamic_sampling_tolerance: float = field(
        default=1e-6, metadata={"help": "A group is degenerate when max - min of its scores <= this. Range: >= 0."}
    )
    dynamic_sampling_max_rounds: int = field(
        default=4, metadata={"help": "Most generation rounds per generation batch, the first included. Range: >= 1."}
    )
    dynamic_sampling_on_exhausted: str = field(
        default="fill",
        metadata={
            "help": 'When the rounds run out before the batch is full: "fill" completes it with degenerate groups '
            '(no signal on the sampling metric) and logs it; "raise" stops with an error.'
        },
    )
    dynamic_sampling_carry_surplus: bool | None = field(
        default=None,
        metadata={
            "help": "Train surplus informative groups in the next generation batch instead of dropping them, with "
            "old log-probs from the policy that generated them (at most one generation batch plus its own updates "
            "stale). True needs one of gradient_accumulation_steps and steps_per_generation * num_iterations to be "
            "a multiple of the other, and a text-only model; None (default): on wherever supported, else off with "
            "a log line. False, with skip_degenerate_prompts=False (the default), is DAPO as published."
        },
    )
    max_rows_per_generate_call: int | None = field(
        default=None,
        metadata={
            "help": "Most rows one process hands transformers' generate in one call, in whole groups (not vLLM). None "
            "(default): sized from the peak memory earlier calls measured; one generation batch per process before "
            "any measurement and on CPU or MPS. An out-of-memory error halves a call and retries it, except under "
            "DeepSpeed ZeRO-3 or FSDP on several processes. Range: a multiple of num_generations, or None."
        },
    )

    skip_degenerate_prompts: bool = field(
        default=False,
        metadata={
            "help": "Skip, before generation, prompts predicted to give all-correct or all-wrong groups (see "
            "skip_predictor) and replace them by others. Needs dynamic_sampling=True. Default False: the real-model "
            "study did not show that it keeps DAPO's accuracy per step."
        },
    )
    skip_predictor: str = field(
        default="posterior",
        metadata={
            "help": 'How degenerate groups are predicted: "posterior" (a per-prompt Beta posterior of the pass '
            'rate, Thompson sampling) or "streak" (consecutive degenerate visits, with adapted explore '
            'probabilities p; GRESO). Range: "posterior", "streak".'
        },
    )
    skip_memory_epochs: float = field(
        default=1.0,
        metadata={
            "help": 'skip_predictor="posterior": half-life of a wrong answer\'s evidence, in passes over the '
            "training dataset (a right answer's lasts 8 times longer), so prompts that became learnable are "
            "explored again. Range: > 0."
        },
    )
    skip_target_degenerate_share: float = field(
        default=0.25,
        metadata={
            "help": "Share of generated groups that may be degenerate (half all-correct, half all-wrong); p of each "
            "kind is adapted toward it. Range: 0 <= value < 1."
        },
    )
    skip_probability_step: float = field(
        default=0.01, metadata={"help": "How far the explore probability p moves per step. Range: 0 < value <= 1."}
    )
    skip_min_explore_probability: float = field(
        default=0.01,
        metadata={
            "help": "Least probability of still generating a prompt predicted degenerate. Range: 0 < value <= 1."
        },
    )

    def __new__(cls, *args, **kwargs):
        for name in kwargs.keys() & REMOVED_FIELDS:
            raise ValueError(REMOVED_FIELDS[name])
        return super().__new__(cls)

    def __post_init__(self):
        self.dynamic_sampling = dynamic_sampling_mode(self.dynamic_sampling)
        check_common_fields(self)
        require(
            self.loss_type in TRL_LOSS_TYPES,
            "loss_type",
            self.loss_type,
            '"dapo" (DAPO\'s token-level loss) or another objective of TRL: "grpo", "bnpo", "dr_grpo", "cispo", '
            '"sapo", "luspo", "vespo"',
        )
        if self.loss_type == "cispo" and self.epsilon_high is not None and self.epsilon_high < 1:
            # TRL's CISPO clamps the importance weight at `epsilon_high` itself, not at 1 + epsilon_high.
            logger.warning(
                f"loss_type='cispo' caps each token's importance weight at epsilon_high={self.epsilon_high}, below 1, "
                "which scales every token's gradient down; CISPO's cap is meant to be above 1 (ScaleRL uses "
                "epsilon_high=5.0)."
            )
        if self.overlong_buffer_length is not None:
            require(
                isinstance(self.overlong_buffer_length, int)
                and 0 < self.overlong_buffer_length < self.max_completion_length,
                "overlong_buffer_length",
                self.overlong_buffer_length,
                f"an integer with 0 < value < max_completion_length ({self.max_completion_length}), or None",
            )
        if self.dynamic_sampling == "drop":
            self._check_drop_fields()
        if self.dynamic_sampling:
            require(
                self.dynamic_sampling_on_exhausted in ("fill", "raise"),
                "dynamic_sampling_on_exhausted",
                self.dynamic_sampling_on_exhausted,
                '"fill" or "raise"',
            )
        if self.max_rows_per_generate_call is not None:
            require(
                self.max_rows_per_generate_call % self.num_generations == 0,
                "max_rows_per_generate_call",
                self.max_rows_per_generate_call,
                f"a multiple of num_generations ({self.num_generations}), since a call holds whole groups, or None",
            )
        if self.skip_degenerate_prompts:
            require(
                self.dynamic_sampling == "regenerate",
                "skip_degenerate_prompts",
                self.skip_degenerate_prompts,
                f"False with dynamic_sampling={self.dynamic_sampling!r} (skipping replaces prompts within "
                'dynamic_sampling="regenerate"\'s rounds)',
            )
            require(
                self.skip_predictor in ("posterior", "streak"),
                "skip_predictor",
                self.skip_predictor,
                '"posterior" or "streak"',
            )
        super().__post_init__()
        # After TRL's checks, which turn the deprecated use_transformers_paged into continuous batching.
        if self.max_rows_per_generate_call is not None:
            require(
                not (self.use_vllm or self.use_transformers_continuous_batching),
                "max_rows_per_generate_call",
                self.max_rows_per_generate_call,
                "None with use_vllm=True or use_transformers_continuous_batching=True, which schedule their own "
                "batches (vllm_gpu_memory_utilization bounds vLLM's memory)",
            )
        # After TRL's own checks, which resolve steps_per_generation. Only an explicit True is checked: the default
        # (None) turns carrying off where it cannot work (dynamic_sampling/selection.py, `resolve_sampling_options`).
        if self.dynamic_sampling == "regenerate" and self.dynamic_sampling_carry_surplus:
            problem = carry_layout_problem(
                self.gradient_accumulation_steps, self.steps_per_generation, self.num_iterations
            )
            require(
                problem is None,
                "dynamic_sampling_carry_surplus",
                self.dynamic_sampling_carry_surplus,
                f"None (on where supported) or False, because {problem}; or keep True and make one of them a "
                "multiple of the other",
            )

    def _check_drop_fields(self) -> None:
        """The rules of dynamic_sampling="drop": no surplus to carry, and no term its loss scale would distort."""
        require(
            not self.dynamic_sampling_carry_surplus,
            "dynamic_sampling_carry_surplus",
            self.dynamic_sampling_carry_surplus,
            'None or False with dynamic_sampling="drop", which generates one batch per step and so has no surplus '
            'groups to carry; carrying goes with dynamic_sampling="regenerate"',
        )
        entropy_bonus = self.entropy_coef != 0.0 or self.use_adaptive_entropy
        require(
            not (entropy_bonus and self.loss_type in ROW_NORMALISED_LOSS_TYPES),
            "loss_type",
            self.loss_type,
            f'one of "dapo", "bnpo", "cispo", "vespo" with dynamic_sampling="drop" and the entropy bonus '
            f"(entropy_coef={self.entropy_coef}, use_adaptive_entropy={self.use_adaptive_entropy}): the "
            "row-normalised objectives are rescaled to their kept rows, which would rescale the bonus too; or set "
            'entropy_coef=0.0, or use dynamic_sampling="regenerate"',
        )
