"""The script arguments of `trl-variants dapo|dr-grpo|grpo`: TRL's `ScriptArguments` plus the reward functions, a
light column mapping, and reasoning-gym tasks as the dataset."""

from dataclasses import dataclass, field

from trl import ScriptArguments

from ..rewards.names import accepted_names_text


@dataclass
class VariantScriptArguments(ScriptArguments):
    """
    Script arguments of `trl-variants dapo|dr-grpo|grpo`: TRL's `ScriptArguments` (dataset_name, dataset_config,
    dataset_train_split, dataset_test_split, ...) plus the reward functions and a light column mapping so public
    datasets can be used without a preprocessing script.

    Args:
        reward_funcs (`list[str]`, *optional*):
            Reward functions by name: `dapo_accuracy`, `accuracy_reward`, `reasoning_accuracy_reward`,
            `think_format_reward`, or a dotted import path. DAPO's soft overlong punishment is set with
            `--overlong_buffer_length` instead.
        reward_model_name_or_path (`str`, *optional*):
            A sequence-classification reward model, added before the reward functions.
        prompt_column (`str`, defaults to `"prompt"`):
            Dataset column holding the prompts; copied to `prompt` (the original column stays).
        solution_column (`str`, *optional*):
            Dataset column holding the gold answers; copied to `solution`, which the accuracy rewards read.
        system_prompt (`str`, *optional*):
            When set, each plain-text prompt becomes a conversation: this system message, then the prompt as the
            user message, so the model's chat template is applied.
        dataset_filter (`list[str]`, *optional*):
            Keep only rows matching `column=value` entries; entries on the same column are alternatives, e.g.
            `level=Level 4 level=Level 5`.
        reasoning_gym_task (`str`, *optional*):
            A reasoning-gym task name (e.g. `basic_arithmetic`) to train on instead of `dataset_name`: its prompts as
            conversations, scored by the task's own verifier (reward `reasoning_gym_<task>`, added to
            `reward_funcs`). Needs the `reasoning-gym` extra and a model with a chat template.
        reasoning_gym_config (`str` or `dict`, *optional*):
            The task's config keys, as JSON text on the command line or a mapping in a recipe, e.g.
            `'{"min_terms": 2, "max_terms": 2}'`. Unknown keys are an error listing the task's keys.
        reasoning_gym_size (`int`, defaults to `1000`):
            Entries generated for training. Range: >= 1.
        reasoning_gym_seed (`int`, defaults to `0`):
            Seed of the generated entries.
    """

    reward_funcs: list[str] | None = field(
        default=None,
        metadata={"help": f"Reward functions by name: {accepted_names_text()}."},
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A sequence-classification reward model (Hub id or local path), used before reward_funcs."},
    )
    prompt_column: str = field(
        default="prompt",
        metadata={"help": "Dataset column holding the prompts; it is copied to `prompt`."},
    )
    solution_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column holding the gold answers; it is copied to `solution`."},
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "When set, plain-text prompts become [system, user] conversations so the chat template applies."
        },
    )
    dataset_filter: list[str] | None = field(
        default=None,
        metadata={
            "help": "Keep rows matching column=value entries; entries on one column are alternatives, e.g. "
            "'level=Level 4' 'level=Level 5'."
        },
    )
    reasoning_gym_task: str | None = field(
        default=None,
        metadata={"help": "A reasoning-gym task to train on instead of --dataset_name, scored by its own verifier."},
    )
    reasoning_gym_config: str | None = field(
        default=None,
        metadata={"help": "The reasoning-gym task's config as JSON, e.g. '{\"min_terms\": 2, \"max_terms\": 2}'."},
    )
    reasoning_gym_size: int = field(
        default=1000,
        metadata={"help": "Entries of the reasoning-gym task generated for training (>= 1)."},
    )
    reasoning_gym_seed: int = field(
        default=0,
        metadata={"help": "Seed of the reasoning-gym task's generated entries."},
    )
