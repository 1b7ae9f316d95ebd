"""The command line of `trl-variants dapo|dr-grpo|grpo`, checked before torch, transformers or TRL load.

Those imports take 10-25 s on a small machine, far too long to wait for a typo. The training commands' fields are
stored as a table (`field_table`: every option of the real parser with its value type, choices and arity, and
`accelerate launch`'s options), rendered from the real parser and compared with it by a test. The table rebuilds
that parser with `argparse` alone, so a flag reads exactly as it will later: the same abbreviations, negative
numbers and type errors. On the values it reads, this module checks what needs no model: unknown flags and recipe
keys (with the nearest field names), types, choices and ranges (`field_ranges`), the required model and reward,
the reward names, the output folder, bf16 on a machine without a GPU, and the local model folders and data file
(its prompt column, read from the file's head). The later full parse raises the same
messages from the same functions for whatever gets past here (this package's cross-field rules, transformers' own).

Where no table matches the installed versions (`field_table.stored_field_table`), nothing is checked here and the
full parse reports every mistake, as before; it also keeps the table for the next run.
"""

import argparse
import difflib
import os
import re
import sys

import yaml

from ..reliability.field_ranges import first_range_problem
from ..rewards.names import accepted_names_text, reward_name_problem
from .common import ACCELERATE_CONFIG_FLAG, CliUsageError
from .data_file_columns import column_surely_absent, data_file_columns
from .launch import missing_launch_package_problem
from .output import check_output_dir
from .sources import (
    NO_DATASET,
    check_local_dataset,
    check_model_folder,
    local_data_file,
    looks_like_path,
    missing_column_problem,
)

# argparse reads "-1" and "-0.5" as values but "-1e-6" as an option; this also matches scientific notation.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

# Device files of GPUs and other accelerators torch can train on (CUDA, ROCm, Intel, Gaudi, TPU, Ascend, Neuron,
# CUDA under WSL, passed-through devices). Where none exists on Linux, the machine has no GPU for bf16.
ACCELERATOR_DEVICE_PREFIXES = ("nvidia", "kfd", "dri", "accel", "davinci", "neuron", "dxg", "vfio", "hpu")
CPU_FLAGS = "--use_cpu true --bf16 false"
BF16_WITHOUT_GPU = (
    "bf16 is on (TRL's configs turn it on unless fp16 is set), and transformers accepts bf16 only on a GPU or with "
    f"use_cpu; this machine has no GPU: add {CPU_FLAGS} to train on the CPU (use_cpu alone trains under bfloat16 "
    "autocast, slowly on most CPUs)."
)
# transformers' own wording of the same refusal, which the full parse turns into BF16_WITHOUT_GPU.
TRANSFORMERS_BF16_REFUSAL = "doesn't support bf16/gpu"


def string_to_bool(value):
    """transformers' `HfArgumentParser` reading of a bool flag's value, with its message (a test keeps them alike)."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


# The value types of the stored table; "other" (a type the table cannot name) is read as text, left to the full parse.
VALUE_TYPES = {"int": int, "float": float, "str": str, "bool": string_to_bool, "other": None}


def none_or(value_type):
    """The reading of TRL's parser for a `T | None` field: "none" or "null", in any case, is None."""
    inner = value_type or str

    def read(text):
        return None if text.lower() in ("none", "null") else inner(text)

    read.__name__ = inner.__name__  # argparse names the type in its message: "invalid int value"
    return read


def nearest_names(name: str, candidates) -> list[str]:
    return difflib.get_close_matches(name, sorted(set(candidates)), n=3, cutoff=0.75)


def did_you_mean(name: str, candidates) -> str:
    """' (did you mean --a or --b?)' for the candidates closest to `name`, or '' when none is close."""
    close = nearest_names(name, candidates)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def field_owner_text(config_name: str) -> str:
    return f"{config_name}, ModelConfig, DatasetMixtureConfig or the script arguments"


def take_unset_flags(argv: list[str], unsettable: dict[str, str]) -> tuple[list[str], set[str]]:
    """`argv` without the `--field none` pairs of optional fields, and the fields they unset.

    `unsettable` maps the option strings of fields whose default is `None` to their field; `report_to` is not
    among them, since "none" is one of its values.
    """
    unset, kept, index = set(), [], 0
    while index < len(argv):
        token = argv[index]
        key, has_inline, inline_value = token.partition("=")
        value = inline_value if has_inline else (argv[index + 1] if index + 1 < len(argv) else None)
        dest = unsettable.get(key)
        if dest is not None and value is not None and value.strip().lower() in ("none", "null"):
            unset.add(dest)
            index += 1 if has_inline else 2
            continue
        kept.append(token)
        index += 1
    return kept, unset


def config_path(argv: list[str]) -> str | None:
    if "--config" in argv:
        index = argv.index("--config")
        return argv[index + 1] if index + 1 < len(argv) else None
    return None


def recipe_key_problem(key: str, recipe: str, config_name: str, command: str, field_options) -> str:
    return (
        f"recipe key {key!r} in {recipe} is not a field of {field_owner_text(config_name)}, nor an accelerate launch "
        f"option{did_you_mean(key, [option[2:] for option in field_options])}; check its spelling against "
        f"`trl-variants {command} --help`."
    )


def check_launch_tokens(tokens: list[str], command: str, config_name: str, launch_options: dict[str, bool],
                        field_options) -> None:  # fmt: skip
    """What the parser did not take must read as launcher flags with their values; anything else is a mistake."""
    expects_value = False
    for token in tokens:
        if expects_value:
            expects_value = False
            continue
        key, has_inline_value, _ = token.partition("=")
        if not token.startswith("-"):
            raise CliUsageError(f"unexpected argument {token!r}; every option of `trl-variants {command}` is a --flag.")
        if key != ACCELERATE_CONFIG_FLAG and key not in launch_options:
            raise CliUsageError(
                f"unknown argument {key}: not a field of {field_owner_text(config_name)}, nor an accelerate launch "
                f"option{did_you_mean(key, [*field_options, *launch_options])}; see `trl-variants {command} --help`."
            )
        expects_value = not has_inline_value and launch_options.get(key, True)


def accelerate_config_value(tokens: list[str], recipe: dict) -> str | None:
    """The `--accelerate_config` value of the launcher's tokens (`--accelerate_config X` or `=X`), else the recipe's."""
    for index, token in enumerate(tokens):
        key, has_inline_value, inline_value = token.partition("=")
        if key == ACCELERATE_CONFIG_FLAG:
            return inline_value if has_inline_value else (tokens[index + 1] if index + 1 < len(tokens) else None)
    value = recipe.get(ACCELERATE_CONFIG_FLAG.removeprefix("--"))
    return None if value is None else str(value)


def check_model_and_reward(model_name_or_path, reward_funcs, reward_model, reasoning_gym_task) -> None:
    if model_name_or_path is None:
        raise CliUsageError("model_name_or_path is required: pass --model_name_or_path or set it in the recipe.")
    if not (reward_funcs or reward_model or reasoning_gym_task):
        raise CliUsageError(
            f"no reward: pass --reward_funcs with one or more of {accepted_names_text()} (or --reasoning_gym_task)."
        )


def has_accelerator_device(dev: str = "/dev") -> bool:
    """Whether this machine may have a device torch can train on in bf16. Off Linux (Apple's MPS, Windows) and
    wherever /dev cannot be read, the answer is yes: only the full parse, with torch, can tell."""
    if not sys.platform.startswith("linux"):
        return True
    try:
        names = os.listdir(dev)
    except OSError:
        return True
    return any(name.startswith(ACCELERATOR_DEVICE_PREFIXES) for name in names)


class QuickParser(argparse.ArgumentParser):
    """The real parser's options, from the stored table, without the dataclasses behind them. Nothing has a
    default, so the namespace holds only what the command line and the recipe set."""

    def __init__(self, command: str, table: dict):
        super().__init__(prog=f"trl-variants {command}", add_help=False, allow_abbrev=table["allow_abbrev"])
        self._negative_number_matcher = NEGATIVE_NUMBER
        for entry in table["actions"]:
            self._add_stored_action(entry)

    def _add_stored_action(self, entry: dict) -> None:
        options, kind = entry["options"], entry["kind"]
        common = {"dest": entry["dest"], "default": argparse.SUPPRESS}
        if kind in ("help", "store_true", "store_false"):
            # A help request is left to the full parser, which prints the help; here it only parses as a flag.
            self.add_argument(*options, action="store_false" if kind == "store_false" else "store_true", **common)
            return
        choices = entry["choices"]
        value_type = VALUE_TYPES[entry["type"]]
        if entry["none_reads_as_none"]:
            value_type = none_or(value_type)
        if choices is not None:
            by_text = {str(choice): choice for choice in choices}

            def value_type(text):  # as transformers' choice type: a choice's text reads as the choice
                return by_text.get(text, text)

        self.add_argument(*options, nargs=entry["nargs"], const=entry["const"], type=value_type, choices=choices,
                          **common)  # fmt: skip

    def error(self, message):
        raise CliUsageError(f"{self.prog}: {message}")


def recipe_default(action: argparse.Action, value):
    """A recipe's `value` for `action` as the command line would give it: one string for a list field
    (`reward_funcs: dapo_accuracy`) is a list of that string, not a sequence of its letters."""
    if isinstance(value, str) and action.nargs in ("+", "*"):
        return [value]
    return value


def read_recipe(path: str) -> dict:
    """The recipe's mapping, checked as TRL's parser will read it (its `env` entry must be a mapping)."""
    try:
        with open(path) as recipe_file:
            recipe = yaml.safe_load(recipe_file)
    except FileNotFoundError as error:
        raise CliUsageError(f"--config: recipe file not found: {error.filename or path}") from None
    except OSError as error:
        raise CliUsageError(f"--config: cannot read the recipe {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise CliUsageError(f"--config: {path} is not valid YAML: {' '.join(str(error).split())}") from None
    if not isinstance(recipe, dict):
        raise CliUsageError(f"Config file {path} must contain a YAML mapping.")
    if not isinstance(recipe.get("env", {}), dict):
        raise CliUsageError("`env` field should be a dict in the YAML file.")
    return {key: value for key, value in recipe.items() if key != "env"}


def check_command_line(command: str, argv: list[str], table: dict) -> None:
    """Raises `CliUsageError` for the first mistake in `argv` that needs no model to see, reading it with
    `command`'s field table."""
    argv = list(argv)
    recipe_path = config_path(argv)
    if "--config" in argv and recipe_path is None:
        raise CliUsageError("--config needs the path of a YAML recipe.")
    parser = QuickParser(command, table)
    kept, unset = take_unset_flags(argv, table["unsettable"])
    recipe = {}
    if recipe_path is not None:
        recipe = read_recipe(recipe_path)
        index = kept.index("--config")
        del kept[index : index + 2]
    dests = {action.dest for action in parser._actions}
    for action in parser._actions:
        if action.dest in unset:
            action.default = None
        elif action.dest in recipe:
            action.default = recipe_default(action, recipe[action.dest])
    namespace, remaining = parser.parse_known_args(kept)
    if getattr(namespace, "help", False):
        return
    problem = first_range_problem(namespace)
    if problem is not None:
        raise CliUsageError(problem)

    config_name, field_options, launch_options = table["config_class"], table["field_options"], table["launch_options"]
    for key in recipe:
        if key not in dests and f"--{key}" not in launch_options and f"--{key}" != ACCELERATE_CONFIG_FLAG:
            raise CliUsageError(recipe_key_problem(key, recipe_path, config_name, command, field_options))
    check_launch_tokens(remaining, command, config_name, launch_options, field_options)

    def value(name):
        return getattr(namespace, name, None)

    reward_funcs = value("reward_funcs")
    check_model_and_reward(value("model_name_or_path"), reward_funcs, value("reward_model_name_or_path"),
                           value("reasoning_gym_task"))  # fmt: skip
    for name in reward_funcs or []:
        problem = reward_name_problem(str(name))
        if problem is not None:
            raise CliUsageError(problem)
    if value("output_dir") is not None:
        check_output_dir(value("output_dir"))
    bf16 = value("bf16") if value("bf16") is not None else not value("fp16")
    if (bf16 or value("bf16_full_eval")) and not value("use_cpu") and not has_accelerator_device():
        raise CliUsageError(BF16_WITHOUT_GPU)
    check_local_sources(value)
    # Last, so that a recipe naming a DeepSpeed config is checked for everything else where DeepSpeed is absent.
    launch_config = accelerate_config_value(remaining, recipe)
    problem = None if launch_config is None else missing_launch_package_problem(launch_config)
    if problem is not None:
        raise CliUsageError(problem)


def check_local_sources(value) -> None:
    """The model folders and the dataset where they are local paths, as `train.run_training` checks them before it
    loads anything; Hub ids are left to it. `value(name)` is a field's value as the command line and recipe set it.
    A reasoning-gym task is checked there first, when it builds the task's entries, so a run that names one is
    left to it whole: the first mistake reported is the same either way."""
    if value("reasoning_gym_task"):
        return
    for name in ("model_name_or_path", "reward_model_name_or_path"):
        path = value(name)
        if path is not None and looks_like_path(str(path)):
            check_model_folder(f"--{name}", str(path))
    if value("datasets"):
        return
    dataset = value("dataset_name")
    if not dataset:
        raise CliUsageError(NO_DATASET)
    if not looks_like_path(dataset):
        return
    check_local_dataset(dataset)
    data_file = local_data_file(dataset)
    # One file is read into a `train` split under the `default` config; other splits and configs are refused later.
    if data_file is None or value("dataset_config") is not None or (value("dataset_train_split") or "train") != "train":
        return
    columns = data_file_columns(data_file)
    if columns is None:
        return
    for column, flag in ((value("prompt_column") or "prompt", "prompt_column"), (value("solution_column"), "solution_column")):
        if column is not None and column_surely_absent(data_file, column, columns):
            raise CliUsageError(missing_column_problem(column, flag, "train", columns))
