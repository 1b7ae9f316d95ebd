"""Command-line arguments for `trl-variants dapo|dr-grpo|grpo`, parsed by TRL's own `TrlParser`.

The parser holds the same dataclasses as `trl grpo` (script arguments, the trainer config, `ModelConfig`,
`DatasetMixtureConfig`), with the variant's config class in place of `GRPOConfig`, so flags, `--config recipe.yaml`
and PEFT flags behave as in TRL. What is left over must be an `accelerate launch` option (or `--accelerate_config`);
anything else is reported as a mistake instead of being silently dropped. Every mistake is one `CliUsageError`.
"""

import argparse
import difflib
import re
import warnings
from dataclasses import dataclass, fields

import yaml
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
from trl.cli.commands.training import _subtract_subsequence

from ..reliability.field_ranges import first_range_problem
from ..rewards.names import accepted_names_text, reward_name_problem
from ..variants import VARIANTS, Variant
from .common import ACCELERATE_CONFIG_FLAG, VARIANT_COMMANDS, CliUsageError
from .script_args import VariantScriptArguments

assert tuple(VARIANTS) == VARIANT_COMMANDS, "common.VARIANT_COMMANDS must list the same commands"

# argparse reads "-1" and "-0.5" as values but "-1e-6" as an option; this also matches scientific notation.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
BF16_WITHOUT_GPU = (
    "bf16 is on (TRL's configs turn it on unless fp16 is set), and transformers accepts bf16 only on a GPU or with "
    "use_cpu; this machine has no GPU: add --use_cpu true --bf16 false to train on the CPU (use_cpu alone trains "
    "under bfloat16 autocast, slowly on most CPUs)."
)
# transformers' wording of that refusal, which the parse turns into BF16_WITHOUT_GPU.
TRANSFORMERS_BF16_REFUSAL = "doesn't support bf16/gpu"
COMMAND_OPTIONS = "options of the command (a flag or recipe key set to 'none' unsets an optional field)"


class VariantParser(TrlParser):
    """`TrlParser` that raises `CliUsageError` instead of printing usage and exiting; refuses, before any config
    object is built, a recipe key or flag that is neither a field nor one of `launch_options` (`accelerate launch`'s
    options, mapped to whether each takes a value) and a numeric value out of its field's range; lets `--field none`
    unset an optional field; and lists its help in one group per dataclass."""

    def __init__(self, dataclass_types, variant: Variant, launch_options: dict[str, bool], **kwargs):
        super().__init__(dataclass_types, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER
        self.variant, self.launch_options = variant, launch_options
        self.unset_fields: set[str] = set()
        self.recipe_path: str | None = None
        self.owners = f"{variant.config_class.__name__}, ModelConfig, DatasetMixtureConfig or the script arguments"
        self.field_options = sorted({f"--{action.dest}" for action in self._actions if action.dest != "help"})

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
        self.check_launch_tokens(remaining)
        return namespace, remaining

    def check_launch_tokens(self, tokens: list[str]) -> None:
        """What the parser did not take must read as launcher flags with their values; anything else is a mistake."""
        command, expects_value = self.variant.command, False
        for token in tokens:
            if expects_value:
                expects_value = False
                continue
            key, has_inline_value, _ = token.partition("=")
            if not token.startswith("-"):
                raise CliUsageError(
                    f"unexpected argument {token!r}; every option of `trl-variants {command}` is a --flag."
                )
            if key != ACCELERATE_CONFIG_FLAG and key not in self.launch_options:
                raise CliUsageError(
                    f"unknown argument {key}: not a field of {self.owners}, nor an accelerate launch option"
                    f"{did_you_mean(key, [*self.field_options, *self.launch_options])}; see "
                    f"`trl-variants {command} --help`."
                )
            expects_value = not has_inline_value and self.launch_options.get(key, True)

    def set_defaults_with_config(self, **kwargs):
        # One string for a list field (`reward_funcs: dapo_accuracy`) is a list of it, not of its letters.
        nargs = {action.dest: action.nargs for action in self._actions}
        kwargs = {
            key: [value] if isinstance(value, str) and nargs.get(key) in ("+", "*") else value
            for key, value in kwargs.items()
        }
        remaining = super().set_defaults_with_config(**kwargs)
        for key in remaining[::2]:  # "--key value" pairs of the recipe keys that are no field
            if key != ACCELERATE_CONFIG_FLAG and key not in self.launch_options:
                raise CliUsageError(
                    f"recipe key {key[2:]!r} in {self.recipe_path} is not a field of {self.owners}, nor an accelerate "
                    f"launch option{did_you_mean(key[2:], [option[2:] for option in self.field_options])}; check its "
                    f"spelling against `trl-variants {self.variant.command} --help`."
                )
        # A field unset on the command line (`--dataset_config none`) overrides the recipe's value for it.
        self.set_defaults(**dict.fromkeys(self.unset_fields, None))
        return remaining

    def take_unset_flags(self, argv: list[str]) -> list[str]:
        """`argv` without the `--field none` pairs of optional fields (default `None`; not `report_to`, whose
        values include "none"), which are recorded in `unset_fields`."""
        optional = {item.name for dtype in self.dataclass_types for item in fields(dtype)
                    if item.default is None and item.name != "report_to"}  # fmt: skip
        kept, index = [], 0
        while index < len(argv):
            key, inline, inline_value = argv[index].partition("=")
            value = inline_value if inline else (argv[index + 1] if index + 1 < len(argv) else None)
            action = self._option_string_actions.get(key)
            if action is not None and action.dest in optional and not key.startswith(("--no_", "--no-")) \
                    and value is not None and value.strip().lower() in ("none", "null"):  # fmt: skip
                self.unset_fields.add(action.dest)
                index += 1 if inline else 2
                continue
            kept.append(argv[index])
            index += 1
        return kept

    def _add_dataclass_arguments(self, dtype):
        title = COMMAND_OPTIONS if dtype is VariantScriptArguments else dtype.__name__
        self._adding_to = self.add_argument_group(title)
        super()._add_dataclass_arguments(dtype)

    def _parse_dataclass_field(self, parser, field):
        TrlParser._parse_dataclass_field(self._adding_to, field)
        action = self._option_string_actions.get(f"--{field.name}")
        if field.type == bool | None and field.default is None and action is not None and action.nargs is None:
            # A bool field that defaults to None (the on-where-supported options, transformers' bf16): a bare flag
            # turns it on, as for a plain bool field; transformers' parser would demand a value.
            action.nargs, action.const = "?", True
        complement = self._option_string_actions.get(f"--no_{field.name}")
        if complement is not None and complement.dest == field.name:
            complement.help, complement.default = f"Sets {field.name} to False.", argparse.SUPPRESS


@dataclass
class ParsedCommand:
    script_args: VariantScriptArguments
    training_args: GRPOConfig
    model_args: ModelConfig
    dataset_args: DatasetMixtureConfig
    launch_args: list[str]
    training_script_args: list[str]


def make_parser(variant: Variant, launch_options: dict[str, bool] | None = None) -> VariantParser:
    return VariantParser(
        (VariantScriptArguments, variant.config_class, ModelConfig, DatasetMixtureConfig),
        variant,
        launch_options or {},
        prog=f"trl-variants {variant.command}",
        usage=f"trl-variants {variant.command} [--config RECIPE.yaml] [--accelerate_config NAME|PATH] "
        "[--FIELD VALUE ...]",
        description=f"{variant.description}. --config RECIPE.yaml reads any field below from YAML (flags win); "
        "--accelerate_config NAME|PATH relaunches under `accelerate launch` with one of TRL's configs (zero1, "
        "zero2, zero3, fsdp1, fsdp2, multi_gpu, single_gpu) or a YAML file, and any `accelerate launch` flag "
        "(--num_processes, ...) then passes through.",
    )


def parse_command(variant: Variant, argv: list[str], launch_options: dict[str, bool]) -> ParsedCommand:
    """Parses `argv` (everything after the subcommand) into the four dataclasses and the launcher's arguments.

    `launch_options` maps each option string `accelerate launch` accepts to whether it takes a value. A recipe key
    or flag that is neither a field nor a launch option raises `CliUsageError` naming it and what is accepted; so
    do invalid values, which the config classes reject in `__post_init__`. Launch settings given on the command
    line override those of the recipe.
    """
    parser = make_parser(variant, launch_options)
    recipe_path = parser.recipe_path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
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
    except OSError as error:
        raise CliUsageError(f"--config: cannot read the recipe {recipe_path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise CliUsageError(f"--config: {recipe_path} is not valid YAML: {one_line(error)}") from None
    except (ValueError, TypeError) as error:
        raise CliUsageError(BF16_WITHOUT_GPU if TRANSFORMERS_BF16_REFUSAL in str(error) else one_line(error)) from None
    script_args, training_args, model_args, dataset_args = dataclasses_
    check_model_and_reward(script_args, model_args)
    # The recipe's keys that are no field came back as "--key value" pairs: launch settings (checked by the parser).
    cli_keys = {item.split("=", 1)[0] for item in cli_remaining if item.startswith("-")}
    recipe_launch_args = [
        item
        for key, value in zip(config_remaining[::2], config_remaining[1::2], strict=True)
        if key not in cli_keys
        for item in _launch_flag(key, value, takes_value=launch_options.get(key, True))
    ]
    return ParsedCommand(
        script_args=script_args,
        training_args=training_args,
        model_args=model_args,
        dataset_args=dataset_args,
        launch_args=recipe_launch_args + cli_remaining,
        # The launcher's flags taken out of the command line, in order, leave the training flags, as `trl` does.
        training_script_args=_subtract_subsequence(argv, cli_remaining),
    )


def did_you_mean(name: str, candidates) -> str:
    """' (did you mean --a or --b?)' for the candidates closest to `name`, or '' when none is close."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def check_model_and_reward(script_args, model_args) -> None:
    if model_args.model_name_or_path is None:
        raise CliUsageError("model_name_or_path is required: pass --model_name_or_path or set it in the recipe.")
    rewards = script_args.reward_funcs or []
    if not (rewards or script_args.reward_model_name_or_path or script_args.reasoning_gym_task):
        raise CliUsageError(
            f"no reward: pass --reward_funcs with one or more of {accepted_names_text()} (or --reasoning_gym_task)."
        )
    problem = next(filter(None, map(reward_name_problem, map(str, rewards))), None)
    if problem is not None:
        raise CliUsageError(problem)


def _launch_flag(key: str, value: str, takes_value: bool) -> list[str]:
    """A recipe's launch setting as command-line strings; a switch such as `same_network: true` is the bare flag."""
    if takes_value:
        return [key, value]
    return [key] if value.lower() in ("true", "1", "yes") else []


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
