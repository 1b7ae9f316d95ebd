"""Relaunching a training command through `accelerate launch`, as `trl grpo --accelerate_config zero2` does:
`--accelerate_config` names one of TRL's bundled accelerate configs (used in place) or a YAML file, other
`accelerate launch` flags pass through, and each process runs `python -m trl_variants.cli <variant> <flags>`."""

import importlib.metadata
import importlib.resources
import importlib.util
import os
import subprocess
from pathlib import Path

import yaml

from .args import ACCELERATE_CONFIG
from .common import CliUsageError, one_line

LAUNCHED_ENV = "TRL_VARIANTS_LAUNCHED"  # set in the processes accelerate starts, so they train instead of launching
CLI_MODULE = "trl_variants.cli"
TRL_CONFIGS = importlib.resources.files("trl.accelerate_configs")


def accelerate_launch_options() -> dict[str, bool]:
    """Every option string `accelerate launch` accepts, mapped to whether it takes a value."""
    from accelerate.commands.launch import launch_command_parser

    return {option: action.nargs != 0 for option, action in launch_command_parser()._option_string_actions.items()}


def inside_launched_process() -> bool:
    """True in a process started by this launcher, `accelerate launch` or `torchrun`: launching again would nest."""
    return os.environ.get(LAUNCHED_ENV) == "1" or "LOCAL_RANK" in os.environ


def missing_launch_package_problem(value: str) -> str | None:
    """The message when the accelerate config `value` names uses DeepSpeed and it is not installed; without the
    check, `accelerate launch` fails with a traceback."""
    path = Path(value) if Path(value).is_file() else Path(str(TRL_CONFIGS / f"{value}.yaml"))
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # left to accelerate, which reports it
    if not isinstance(config, dict) or str(config.get("distributed_type", "")).upper() != "DEEPSPEED" \
            or importlib.util.find_spec("deepspeed") is not None:  # fmt: skip
        return None
    try:  # pip keeps the installed torch build when the command pins it
        torch_pin = f" torch=={importlib.metadata.version('torch')}"
    except importlib.metadata.PackageNotFoundError:
        torch_pin = ""
    return (
        f"--accelerate_config {value}: distributed_type DEEPSPEED needs deepspeed, which is not installed; install "
        f'the tested version from this repository with `pip install ".[deepspeed]"{torch_pin}`.'
    )


def build_launch_namespace(command: str, launch_args: list[str], training_script_args: list[str]):
    """The parsed `accelerate launch` arguments that run `python -m trl_variants.cli <command> ...` per process;
    `--accelerate_config NAME|PATH` becomes `--config_file PATH` with TRL's own resolver."""
    from accelerate.commands.launch import launch_command_parser
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    try:
        launch_args = resolve_accelerate_config_argument(launch_args)
    except ValueError as error:
        names = sorted(entry.name[:-5] for entry in TRL_CONFIGS.iterdir() if entry.name.endswith(".yaml"))
        raise CliUsageError(f"--accelerate_config: {one_line(error)} TRL's configs: {', '.join(names)}.") from None
    parser = launch_command_parser()
    parser.error = _launch_error
    return parser.parse_args([*launch_args, "--module", CLI_MODULE, command, *training_script_args])


def _launch_error(message: str):
    raise CliUsageError(f"accelerate launch: {message}")


def relaunch(command: str, launch_args: list[str], training_script_args: list[str]) -> int:
    """Runs the training command under `accelerate launch`; returns the exit code of the processes."""
    from accelerate.commands.launch import launch_command

    launch_args = [part for token in launch_args for part in
                   (token.split("=", 1) if token.startswith(f"{ACCELERATE_CONFIG}=") else [token])]  # fmt: skip
    # Checked as the processes are about to start, not while parsing: a command naming a DeepSpeed config is
    # parsed and checked alike on a machine without DeepSpeed.
    if ACCELERATE_CONFIG in launch_args[:-1]:
        if problem := missing_launch_package_problem(launch_args[launch_args.index(ACCELERATE_CONFIG) + 1]):
            raise CliUsageError(problem)
    namespace = build_launch_namespace(command, launch_args, training_script_args)
    os.environ[LAUNCHED_ENV] = "1"
    try:
        launch_command(namespace)
    except subprocess.CalledProcessError as error:  # the child printed its own error; keep its exit code
        return error.returncode
    except Exception as error:  # torchrun's ChildFailedError carries the failing ranks' exit codes
        if failures := getattr(error, "failures", None):
            return next(iter(failures.values())).exitcode
        raise
    finally:
        os.environ.pop(LAUNCHED_ENV, None)
    return 0
