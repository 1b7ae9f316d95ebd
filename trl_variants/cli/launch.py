"""Relaunching a training command through `accelerate launch`, as `trl grpo --accelerate_config zero2` does.

`--accelerate_config NAME` names one of the accelerate configs bundled with TRL (`zero1`, `zero2`, `zero3`,
`fsdp1`, `fsdp2`, `multi_gpu`, `single_gpu`), used in place by path, or a YAML file of your own. Other
`accelerate launch` flags (`--num_processes`, `--num_machines`, `--machine_rank`, `--main_process_ip`, ...) pass
through. Each process then runs `python -m trl_variants.cli <variant> <training flags>`.
"""

import importlib.metadata
import importlib.resources
import importlib.util
import os
import subprocess
from pathlib import Path

import yaml

from .common import ACCELERATE_CONFIG_FLAG, CliUsageError

# Set in the processes accelerate starts, so they train instead of launching again.
LAUNCHED_ENV = "TRL_VARIANTS_LAUNCHED"
CLI_MODULE = "trl_variants.cli"


# What an accelerate config's `distributed_type` needs installed: the module accelerate imports, and how to get it.
DISTRIBUTED_TYPE_NEEDS = {
    "DEEPSPEED": ("deepspeed", "the tested version from this repository with `pip install \".[deepspeed]\"{torch_pin}`"),
    "MEGATRON_LM": ("megatron", "Megatron-LM as accelerate's Megatron-LM guide says"),
    "XLA": ("torch_xla", "torch_xla for your torch version"),
}


def accelerate_config_file(value: str) -> Path | None:
    """The file `--accelerate_config VALUE` names: a YAML file, or one of TRL's bundled configs."""
    if Path(value).is_file():
        return Path(value)
    bundled = Path(str(importlib.resources.files("trl.accelerate_configs") / f"{value}.yaml"))
    return bundled if bundled.is_file() else None


def missing_launch_package_problem(value: str) -> str | None:
    """The message when the accelerate config `value` names trains with a package that is not installed;
    without it, `accelerate launch` fails with a traceback."""
    path = accelerate_config_file(value)
    try:
        config = yaml.safe_load(path.read_text()) if path is not None else None
    except (OSError, yaml.YAMLError):
        return None  # left to accelerate, which reports it
    if not isinstance(config, dict):
        return None
    distributed_type = str(config.get("distributed_type", "")).upper()
    if distributed_type not in DISTRIBUTED_TYPE_NEEDS:
        return None
    module, how = DISTRIBUTED_TYPE_NEEDS[distributed_type]
    if importlib.util.find_spec(module) is not None:
        return None
    return (
        f"--accelerate_config {value}: distributed_type {distributed_type} needs {module}, which is not installed; "
        f"install {how.format(torch_pin=installed_torch_pin())}."
    )


def installed_torch_pin() -> str:
    """' torch==VERSION' for the installed torch (read from its metadata, without importing it), so that pip keeps
    that build rather than replacing it; '' when torch is not installed."""
    try:
        return f" torch=={importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        return ""


def accelerate_launch_options() -> dict[str, bool]:
    """Every option string `accelerate launch` accepts, mapped to whether it takes a value."""
    from accelerate.commands.launch import launch_command_parser

    actions = launch_command_parser()._option_string_actions
    return {option: action.nargs != 0 for option, action in actions.items()}


def bundled_accelerate_configs() -> list[str]:
    folder = importlib.resources.files("trl.accelerate_configs")
    return sorted(entry.name.removesuffix(".yaml") for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def inside_launched_process() -> bool:
    """True in a process started by this launcher, `accelerate launch` or `torchrun`: launching again would nest."""
    return os.environ.get(LAUNCHED_ENV) == "1" or "LOCAL_RANK" in os.environ


def resolve_launch_args(launch_args: list[str]) -> list[str]:
    """Turns `--accelerate_config NAME|PATH` into `--config_file PATH` with TRL's own resolver."""
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    launch_args = [part for token in launch_args for part in _split_inline_accelerate_config(token)]
    if ACCELERATE_CONFIG_FLAG in launch_args:
        index = launch_args.index(ACCELERATE_CONFIG_FLAG)
        value = launch_args[index + 1] if index + 1 < len(launch_args) else None
        if value is None or value.startswith("--"):
            raise CliUsageError(
                f"--accelerate_config needs a value: one of {bundled_accelerate_configs()} or a path to a YAML file."
            )
        if not Path(value).is_file() and value not in bundled_accelerate_configs():
            raise CliUsageError(
                f"--accelerate_config {value!r} is neither a file nor one of TRL's bundled configs "
                f"{bundled_accelerate_configs()}."
            )
    try:
        return resolve_accelerate_config_argument(list(launch_args))
    except ValueError as error:
        raise CliUsageError(str(error)) from None


def _split_inline_accelerate_config(token: str) -> list[str]:
    if token.startswith(f"{ACCELERATE_CONFIG_FLAG}="):
        return token.split("=", 1)
    return [token]


def build_launch_namespace(command: str, launch_args: list[str], training_script_args: list[str]):
    """The parsed `accelerate launch` arguments that run `python -m trl_variants.cli <command> ...` per process."""
    from accelerate.commands.launch import launch_command_parser

    argv = [*resolve_launch_args(launch_args), "--module", CLI_MODULE, command, *training_script_args]
    parser = launch_command_parser()
    parser.error = _raise_launch_error
    return parser.parse_args(argv)


def _raise_launch_error(message: str):
    raise CliUsageError(f"accelerate launch: {message}")


def relaunch(command: str, launch_args: list[str], training_script_args: list[str]) -> int:
    """Runs the training command under `accelerate launch`; returns the exit code of the processes."""
    from accelerate.commands.launch import launch_command

    # Checked here, when the processes are about to start, not while parsing: a command or recipe naming a
    # DeepSpeed config parses and is checked alike on a machine without DeepSpeed.
    launch_args = [part for token in launch_args for part in _split_inline_accelerate_config(token)]
    if ACCELERATE_CONFIG_FLAG in launch_args[:-1]:
        problem = missing_launch_package_problem(launch_args[launch_args.index(ACCELERATE_CONFIG_FLAG) + 1])
        if problem is not None:
            raise CliUsageError(problem)
    namespace = build_launch_namespace(command, launch_args, training_script_args)
    os.environ[LAUNCHED_ENV] = "1"
    try:
        launch_command(namespace)
    except subprocess.CalledProcessError as error:
        # The child already printed its own error; keep its exit code (2 for bad input).
        return error.returncode
    except Exception as error:  # torchrun's ChildFailedError carries the failing ranks' exit codes
        failures = getattr(error, "failures", None)
        if failures:
            return next(iter(failures.values())).exitcode
        raise
    finally:
        os.environ.pop(LAUNCHED_ENV, None)
    return 0
