"""Command-line arguments of `trl-variants dapo|dr-grpo|grpo`, parsed by TRL's own `TrlParser` over the dataclasses
`trl grpo` uses (script arguments, the trainer config, `ModelConfig`, `DatasetMixtureConfig`), with the variant's
config class in place of `GRPOConfig`: flags, `--config recipe.yaml` and PEFT flags behave as in TRL. What is left
over must be an `accelerate launch` option or `--accelerate_config`. Every mistake is one `CliUsageError`.
"""

import contextlib
import difflib
import json
import re
import warnings
from dataclasses import dataclass, field, fields

import yaml
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, ScriptArguments, TrlParser
from trl.cli.commands.training import _subtract_subsequence

from ..reliability.config_checks import REMOVED_FIELDS
from ..reliability.field_ranges import first_range_problem
from ..rewards.names import accepted_names_text, reward_name_problem
from ..variants import VARIANTS, Variant
from .common import VARIANT_COMMANDS, CliUsageError, one_line

assert tuple(VARIANTS) == VARIANT_COMMANDS, "common.VARIANT_COMMANDS must list the same commands"

ACCELERATE_CONFIG = "--accelerate_config"  # resolved into `--config_file` by TRL's helper; no accelerate flag
# argparse reads "-1" and "-0.5" as values but "-1e-6" as an option; this also matches scientific notation.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclass
class VariantScriptArguments(ScriptArguments):
    """TRL's `ScriptArguments` (dataset_name, dataset_config, splits, ...) plus the rewards, a light column mapping
    and reasoning-gym tasks, so that public datasets train without a preprocessing script."""

    reward_funcs: list[str] | None = field(default=None, metadata={"help": f"Rewards: {accepted_names_text()}."})
    reward_model_name_or_path: str | None = field(
        default=None, metadata={"help": "A sequence-classification reward model, used before reward_funcs."}
    )
    prompt_column: str = field(default="prompt", metadata={"help": "Column of the prompts; copied to `prompt`."})
    solution_column: str | None = field(
        default=None, metadata={"help": "Column of the gold answers; copied to `solution`, which rewards read."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "Makes prompts [system, user] conversations."})
    dataset_filter: list[str] | None = field(
        default=None, metadata={"help": "Keep rows matching column=value entries; entries on one column are "
                                "alternatives, e.g. 'level=Level 4' 'level=Level 5'."},  # fmt: skip
    )
    reasoning_gym_task: str | None = field(
        default=None, metadata={"help": "A reasoning-gym task to train on instead of --dataset_name, scored by its "
                                "own verifier (reward reasoning_gym_<task>)."},  # fmt: skip
    )
    reasoning_gym_config: str | None = field(
        default=None, metadata={"help": "The task's config as a JSON object, e.g. '{\"min_terms\": 2}'."}
    )
    reasoning_gym_size: int = field(default=1000, metadata={"help": "Entries of the task generated for training."})
    reasoning_gym_seed: int = field(default=0, metadata={"help": "Seed of the task's generated entries."})

    def __post_init__(self):
        config = self.reasoning_gym_config
        with contextlib.suppress(json.JSONDecodeError):  # JSON text from the command line; a recipe gives a mapping
            self.reasoning_gym_config = json.loads(config) if isinstance(config, str) else config
        if not isinstance(self.reasoning_gym_config, dict | None):
            raise ValueError(f"--reasoning_gym_config={config!r} is not a JSON object; pass the task's config keys, "
                             "such as '{\"min_terms\": 2}'.")  # fmt: skip


class VariantParser(TrlParser):
    """`TrlParser` that raises `CliUsageError` instead of exiting; refuses a value out of its field's range and a
    flag or recipe key that is neither a field nor one of `launch_options` (`accelerate launch`'s options, mapped to
    whether each takes a value); lets `none` unset an optional field (default `None`; not `report_to`, whose values
    include "none"), also one the recipe sets, and a bare flag turn on a `bool | None` field (transformers' parser
    would demand a value)."""

    def __init__(self, variant: Variant, launch_options: dict[str, bool], recipe_path: str | None):
        command = f"trl-variants {variant.command}"
        super().__init__(
            (VariantScriptArguments, variant.config_class, ModelConfig, DatasetMixtureConfig),
            prog=command,
            usage=f"{command} [--config RECIPE.yaml] [--accelerate_config NAME|PATH] [--FIELD VALUE ...]",
            description=f"{variant.description}. --config RECIPE.yaml reads any field below from YAML (flags win; "
            "`none` unsets an optional field); --accelerate_config NAME|PATH relaunches under `accelerate launch` "
            "with one of TRL's configs (zero1, zero2, zero3, fsdp1, fsdp2, multi_gpu, single_gpu) or a YAML file, "
            "and any `accelerate launch` flag (--num_processes, ...) then passes through.",
        )
        self._negative_number_matcher = NEGATIVE_NUMBER
        self.launch_options, self.recipe_path = launch_options, recipe_path
        optional = {item.name for dtype in self.dataclass_types for item in fields(dtype)
                    if item.default is None and item.name != "report_to"}  # fmt: skip
        for action in self._actions:
            if getattr(action.type, "__name__", "") == "string_to_bool" and action.nargs is None:  # a `bool | None`
                action.nargs, action.const = "?", True
            if action.dest in optional and action.type is not None:
                action.type = none_or(action.type)
                action.choices = None if action.choices is None else [*action.choices, None]

    def error(self, message):
        raise CliUsageError(f"{self.prog}: {message}")

    def check_known(self, key: str, in_recipe: bool = False) -> None:
        """Raises `CliUsageError` unless `key` (`--name`) is a launch option; the parser has taken every field."""
        if key == ACCELERATE_CONFIG or key in self.launch_options:
            return
        if key.lstrip("-") in REMOVED_FIELDS:
            raise CliUsageError(REMOVED_FIELDS[key.lstrip("-")])
        names = {action.dest for action in self._actions} | {option.lstrip("-") for option in self.launch_options}
        close = difflib.get_close_matches(key.lstrip("-"), sorted(names), n=3, cutoff=0.75)
        guess = f" (did you mean {' or '.join(('' if in_recipe else '--') + name for name in close)}?)" if close else ""
        what = f"recipe key {key[2:]!r} in {self.recipe_path}:" if in_recipe else f"unknown argument {key}:"
        raise CliUsageError(
            f"{what} not a field of {self.dataclass_types[1].__name__}, ModelConfig, DatasetMixtureConfig or the "
            f"script arguments, nor an accelerate launch option{guess}; see `{self.prog} --help`."
        )

    def parse_known_args(self, args=None, namespace=None):
        # Ranges are checked on the parsed values, recipe included, before the config classes run: TRL's GRPOConfig
        # and ModelConfig do not check them, and GRPOConfig divides by the batch size before a variant could.
        namespace, remaining = super().parse_known_args(args, namespace)
        for name, value in vars(namespace).items():
            if value == [None]:  # a list field unset with `--field none`
                setattr(namespace, name, None)
        if problem := first_range_problem(namespace):
            raise CliUsageError(problem)
        expects_value = False
        for token in remaining:  # what the parser left must be launcher flags with their values
            if expects_value:
                expects_value = False
                continue
            if not token.startswith("-"):
                raise CliUsageError(f"unexpected argument {token!r}; every option of `{self.prog}` is a --flag.")
            key, inline, _ = token.partition("=")
            self.check_known(key)
            expects_value = not inline and self.launch_options.get(key, True)
        return namespace, remaining

    def set_defaults_with_config(self, **kwargs):
        # One string for a list field (`reward_funcs: dapo_accuracy`) is a list of it, not of its letters.
        nargs = {action.dest: action.nargs for action in self._actions}
        kwargs = {key: [value] if isinstance(value, str) and nargs.get(key) == "+" else value
                  for key, value in kwargs.items()}  # fmt: skip
        remaining = super().set_defaults_with_config(**kwargs)
        for key in remaining[::2]:  # "--key value" pairs of the recipe keys that are no field
            self.check_known(key, in_recipe=True)
        return remaining


def none_or(convert):
    """`convert`, except that `none` and `null` (any case) mean `None`; named as `convert`, for argparse's errors."""

    def parse(value: str):
        return None if value.strip().lower() in ("none", "null") else convert(value)

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


@dataclass
class ParsedCommand:
    script_args: VariantScriptArguments
    training_args: GRPOConfig
    model_args: ModelConfig
    dataset_args: DatasetMixtureConfig
    launch_args: list[str]  # the launcher's, recipe's first (a command-line flag overrides its recipe key)
    training_script_args: list[str]  # the command line without the launcher's flags, for the launched processes


def parse_command(variant: Variant, argv: list[str], launch_options: dict[str, bool]) -> ParsedCommand:
    """Parses `argv` (everything after the subcommand) into the four dataclasses and the launcher's arguments;
    `launch_options` maps each option string `accelerate launch` accepts to whether it takes a value."""
    if argv[-1:] == ["--config"]:
        raise CliUsageError("--config needs the path of a YAML recipe.")
    recipe_path = argv[argv.index("--config") + 1] if "--config" in argv else None
    parser = VariantParser(variant, launch_options, recipe_path)
    try:
        with warnings.catch_warnings():
            # GRPOConfig's own defaults trip transformers' deprecation warnings; they say nothing about the input.
            warnings.simplefilter("ignore", FutureWarning)
            *dataclasses_, config_remaining, cli_remaining = parser.parse_args_and_config(
                argv, return_remaining_strings=True, separate_remaining_strings=True
            )
    except (OSError, yaml.YAMLError) as error:
        if recipe_path is None:
            raise
        raise CliUsageError(f"--config {recipe_path}: {one_line(error)}") from None
    except (ValueError, TypeError) as error:  # the config classes' own checks, in `__post_init__`
        raise CliUsageError(one_line(error)) from None
    script_args, training_args, model_args, dataset_args = dataclasses_
    if model_args.model_name_or_path is None:
        raise CliUsageError("model_name_or_path is required: pass --model_name_or_path or set it in the recipe.")
    if not (script_args.reward_funcs or script_args.reward_model_name_or_path or script_args.reasoning_gym_task):
        raise CliUsageError(f"no reward: pass --reward_funcs with one or more of {accepted_names_text()} (or "
                            "--reward_model_name_or_path, or --reasoning_gym_task).")
    if problem := next(filter(None, map(reward_name_problem, map(str, script_args.reward_funcs or []))), None):
        raise CliUsageError(problem)
    if script_args.reasoning_gym_task and (script_args.dataset_name or dataset_args.datasets):
        raise CliUsageError(f"--reasoning_gym_task={script_args.reasoning_gym_task!r} and a dataset (--dataset_name "
                            "or a `datasets:` list) both name the training data; pass one of them.")  # fmt: skip
    cli_keys = {item.split("=", 1)[0] for item in cli_remaining if item.startswith("-")}
    recipe_launch_args = [  # a recipe's switch (`same_network: true`) is the bare flag
        item
        for key, value in zip(config_remaining[::2], config_remaining[1::2], strict=True)
        if key not in cli_keys
        for item in ([key, value] if launch_options.get(key, True) else [key] * (value.lower() in ("true", "1", "yes")))
    ]
    return ParsedCommand(script_args, training_args, model_args, dataset_args, recipe_launch_args + cli_remaining,
                         _subtract_subsequence(argv, cli_remaining))  # fmt: skip
