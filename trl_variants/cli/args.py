"""Command-line arguments for `trl-variants dapo|dr-grpo|grpo`, parsed by TRL's own `TrlParser`.

The parser holds the same dataclasses as `trl grpo` (script arguments, the trainer config, `ModelConfig`,
`DatasetMixtureConfig`), with the variant's config class in place of `GRPOConfig`, so flags, `--config recipe.yaml`
and PEFT flags behave as in TRL. What is left over must be an `accelerate launch` option (or `--accelerate_config`);
anything else is reported as a mistake instead of being silently dropped.
"""

import argparse
import functools
import warnings
from dataclasses import dataclass, fields

import yaml
from transformers import TrainingArguments
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser

from ..reliability.field_ranges import first_range_problem
from ..variants import VARIANTS, Variant
from .common import ACCELERATE_CONFIG_FLAG, HELP_WIDTH, VARIANT_COMMANDS, CliUsageError
from .quick_checks import (
    BF16_WITHOUT_GPU,
    NEGATIVE_NUMBER,
    TRANSFORMERS_BF16_REFUSAL,
    check_launch_tokens,
    check_model_and_reward,
    config_path,
    recipe_default,
    recipe_key_problem,
    take_unset_flags,
)
from .script_args import VariantScriptArguments

assert tuple(VARIANTS) == VARIANT_COMMANDS, "common.VARIANT_COMMANDS must list the same commands"


class VariantParser(TrlParser):
    """`TrlParser` that raises `CliUsageError` instead of printing usage and exiting, so every mistake is one line,
    checks every numeric value against its allowed range before any config object is built, and whose help lists
    the options in groups: the command's own, the variant's fields, then TRL's and transformers' fields (TrlParser
    lists well over a thousand lines in one block)."""

    def __init__(self, dataclass_types, variant: "Variant", **kwargs):
        self._variant = variant
        self._groups: dict[str, argparse._ArgumentGroup] = {}
        super().__init__(dataclass_types, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER
        order = [self._group(title) for title in help_group_titles(variant)]
        self._action_groups = [group for group in self._action_groups if group not in order] + order

    def error(self, message):
        raise CliUsageError(f"{self.prog}: {message}")

    def parse_known_args(self, args=None, namespace=None):
        # Checked on the parsed values, recipe included, before the config classes run: TRL's GRPOConfig and
        # ModelConfig (the `grpo` baseline, LoRA flags) do not check ranges, and GRPOConfig divides by the batch
        # size before a variant config could.
        namespace, remaining = super().parse_known_args(args, namespace)
        problem = first_range_problem(namespace)
        if problem is not None:
            raise CliUsageError(problem)
        return namespace, remaining

    def set_defaults_with_config(self, **kwargs):
        # A field unset on the command line (`--dataset_config none`) overrides the recipe's value for it.
        actions = {action.dest: action for action in self._actions}
        kwargs = {key: recipe_default(actions[key], value) if key in actions else value for key, value in kwargs.items()}
        remaining = super().set_defaults_with_config(**kwargs)
        self.set_defaults(**dict.fromkeys(self.unset_fields, None))
        return remaining

    def take_unset_flags(self, argv: list[str]) -> list[str]:
        """`argv` without the `--field none` pairs of optional fields, which are recorded in `unset_fields`."""
        kept, self.unset_fields = take_unset_flags(argv, self.optional_field_dests)
        return kept

    @property
    def optional_field_dests(self) -> dict[str, str]:
        """The option strings of the fields that `--field none` unsets (default `None`, but not `report_to`, whose
        values include "none"), mapped to their field."""
        optional = {
            item.name
            for dtype in self.dataclass_types
            for item in fields(dtype)
            if item.default is None and item.name != "report_to"
        }
        return {
            option: action.dest
            for option, action in self._option_string_actions.items()
            if action.dest in optional and not option.startswith(("--no_", "--no-"))
        }

    def _group(self, title: str) -> "argparse._ArgumentGroup":
        if title not in self._groups:
            self._groups[title] = self.add_argument_group(title, HELP_GROUP_DESCRIPTIONS.get(title))
        return self._groups[title]

    def _add_dataclass_arguments(self, dtype):
        self._adding = dtype
        super()._add_dataclass_arguments(dtype)

    def _parse_dataclass_field(self, parser, field):
        title = help_group_title(self._variant, self._adding, field.name)
        TrlParser._parse_dataclass_field(self._group(title), field)
        action = self._option_string_actions.get(f"--{field.name}")
        if field.type == bool | None and field.default is None and action is not None and action.nargs is None:
            # A bool field that defaults to None (the on-where-supported options, transformers' bf16): a bare flag
            # turns it on, as for a plain bool field; transformers' parser would demand a value.
            action.nargs, action.const = "?", True
        complement = self._option_string_actions.get(f"--no_{field.name}")
        if complement is not None and complement.dest == field.name:
            complement.help = f"Sets {field.name} to False."
            # Its own default would print as "(default: False)", which reads as the field's default.
            complement.default = argparse.SUPPRESS


COMMAND_GROUP = "options of the command"
HELP_GROUP_DESCRIPTIONS = {COMMAND_GROUP: "A flag or recipe key set to 'none' unsets an optional field."}
# Options the command handles before TRL's parser sees the rest, listed in the help only: parsing them as fields
# would hide them from TrlParser's recipe reading and from the launcher.
HELP_ONLY_OPTIONS = {
    "--config": ("RECIPE.yaml", "YAML recipe whose keys are any of the fields below; command-line flags win."),
    ACCELERATE_CONFIG_FLAG: (
        "NAME|PATH",
        "Relaunch with `accelerate launch` using one of TRL's configs (zero1, zero2, zero3, fsdp1, fsdp2, "
        "multi_gpu, single_gpu) or a YAML file; any `accelerate launch` flag (--num_processes, --num_machines, "
        "...) then passes through.",
    ),
}


def help_group_titles(variant: "Variant") -> list[str]:
    config_name = variant.config_class.__name__
    titles = [COMMAND_GROUP]
    if variant.config_class is not GRPOConfig:
        titles.append(f"{config_name}: the fields {config_name} adds or sets differently from GRPOConfig")
    titles += [
        "TRL ModelConfig: model loading and PEFT",
        "TRL GRPOConfig: the GRPO fields",
        "TRL DatasetMixtureConfig: several datasets from the recipe",
        "transformers TrainingArguments",
    ]
    return titles


def help_group_title(variant: "Variant", dtype: type, field_name: str) -> str:
    titles = help_group_titles(variant)
    if dtype is VariantScriptArguments:
        return COMMAND_GROUP
    if dtype is ModelConfig:
        return titles[-4]
    if dtype is DatasetMixtureConfig:
        return titles[-2]
    if field_name in _variant_field_names(variant.config_class):
        return titles[1]
    if field_name in _field_defaults(GRPOConfig) and field_name not in _field_defaults(TrainingArguments):
        return titles[-3]
    return titles[-1]


def _field_defaults(config_class: type) -> dict[str, object]:
    return {item.name: item.default for item in fields(config_class)}


def _variant_field_names(config_class: type) -> set[str]:
    """Fields a variant config adds to GRPOConfig, gives another default or declares again."""
    if config_class is GRPOConfig:
        return set()
    base = _field_defaults(GRPOConfig)
    return {
        name
        for name, default in _field_defaults(config_class).items()
        if name not in base or base[name] != default or name in vars(config_class).get("__annotations__", {})
    }


@dataclass
class ParsedCommand:
    script_args: VariantScriptArguments
    training_args: GRPOConfig
    model_args: ModelConfig
    dataset_args: DatasetMixtureConfig
    launch_args: list[str]
    training_script_args: list[str]


def make_parser(variant: Variant, for_help: bool = False) -> VariantParser:
    dataclass_types = (VariantScriptArguments, variant.config_class, ModelConfig, DatasetMixtureConfig)
    parser = VariantParser(
        dataclass_types,
        variant,
        prog=f"trl-variants {variant.command}",
        usage=f"trl-variants {variant.command} [--config RECIPE.yaml] [--accelerate_config NAME|PATH] "
        "[--FIELD VALUE ...]",
        description=variant.description,
        # HfArgumentParser's formatter (defaults shown), at a fixed width so the pre-rendered help matches.
        formatter_class=functools.partial(argparse.ArgumentDefaultsHelpFormatter, width=HELP_WIDTH),
    )
    if for_help:
        group = parser._group(COMMAND_GROUP)
        for flag, (metavar, help_text) in reversed(HELP_ONLY_OPTIONS.items()):
            group.add_argument(flag, metavar=metavar, help=help_text, default=argparse.SUPPRESS)
            group._group_actions.insert(0, group._group_actions.pop())
    return parser


def field_option_names(parser: VariantParser) -> list[str]:
    """Every field as `--name`, the spelling `did you mean` suggests."""
    return sorted({f"--{action.dest}" for action in parser._actions if action.dest != "help"})


def parse_command(variant: Variant, argv: list[str], launch_options: dict[str, bool]) -> ParsedCommand:
    """Parses `argv` (everything after the subcommand) into the four dataclasses and the launcher's arguments.

    `launch_options` maps each option string `accelerate launch` accepts to whether it takes a value. A recipe key
    or flag that is neither a field nor a launch option raises `CliUsageError` naming it and what is accepted; so
    do invalid values, which the config classes reject in `__post_init__`. Launch settings given on the command
    line override those of the recipe.
    """
    parser = make_parser(variant, for_help=bool({"-h", "--help"} & set(argv)))
    recipe_path = config_path(argv)
    if "--config" in argv and recipe_path is None:
        raise CliUsageError("--config needs the path of a YAML recipe.")
    try:
        with warnings.catch_warnings():
            # GRPOConfig's own defaults trip transformers' deprecation warnings; they say nothing about the input.
            warnings.simplefilter("ignore", FutureWarning)
            *dataclasses_, config_remaining, cli_remaining = parser.parse_args_and_config(
                parser.take_unset_flags(argv), return_remaining_strings=True, separate_remaining_strings=True
            )
    except FileNotFoundError as error:
        raise CliUsageError(f"--config: recipe file not found: {error.filename or recipe_path}") from None
    except yaml.YAMLError as error:
        raise CliUsageError(f"--config: {recipe_path} is not valid YAML: {_one_line(error)}") from None
    except (ValueError, TypeError) as error:
        raise CliUsageError(BF16_WITHOUT_GPU if TRANSFORMERS_BF16_REFUSAL in str(error) else _one_line(error)) from None
    script_args, training_args, model_args, dataset_args = dataclasses_

    # TrlParser hands back recipe keys that are no field as "--key value" pairs.
    recipe_pairs = list(zip(config_remaining[::2], config_remaining[1::2], strict=True))
    config_name = variant.config_class.__name__
    field_options = field_option_names(parser)
    for key, _ in recipe_pairs:
        if key != ACCELERATE_CONFIG_FLAG and key not in launch_options:
            raise CliUsageError(recipe_key_problem(key[2:], recipe_path, config_name, variant.command, field_options))
    check_launch_tokens(cli_remaining, variant.command, config_name, launch_options, field_options)
    cli_keys = set(_option_names(cli_remaining))
    check_model_and_reward(
        model_args.model_name_or_path, script_args.reward_funcs, script_args.reward_model_name_or_path,
        script_args.reasoning_gym_task,
    )  # fmt: skip
    recipe_launch_args = [
        item
        for key, value in recipe_pairs
        if key not in cli_keys
        for item in _launch_flag(key, value, takes_value=launch_options.get(key, True))
    ]
    return ParsedCommand(
        script_args=script_args,
        training_args=training_args,
        model_args=model_args,
        dataset_args=dataset_args,
        launch_args=recipe_launch_args + cli_remaining,
        training_script_args=_without_subsequence(argv, cli_remaining),
    )


def _launch_flag(key: str, value: str, takes_value: bool) -> list[str]:
    """A recipe's launch setting as command-line strings; a switch such as `same_network: true` is the bare flag."""
    if takes_value:
        return [key, value]
    return [key] if value.lower() in ("true", "1", "yes") else []


def _option_names(strings: list[str]) -> list[str]:
    return [item.split("=", 1)[0] for item in strings if item.startswith("-")]


def _without_subsequence(items: list[str], subsequence: list[str]) -> list[str]:
    """`items` with the ordered `subsequence` taken out (the launcher's flags, leaving the training flags)."""
    pending = iter(subsequence)
    current = next(pending, None)
    kept = []
    for item in items:
        if current is not None and item == current:
            current = next(pending, None)
        else:
            kept.append(item)
    return kept


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
