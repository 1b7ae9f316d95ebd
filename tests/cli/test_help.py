"""`--help` of every command: the light ones (`trl-variants --help`, the demo's) import neither torch nor TRL; a
training command's is TRL's parser's help, one group per dataclass, the command's own options first."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import command_help

REPO_ROOT = Path(__file__).resolve().parents[2]


def imported_modules(*argv: str) -> set[str]:
    """Top-level modules a real `python -m trl_variants.cli ARGV` process imports, from `-X importtime`."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trl_variants.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: trl-variants" in result.stdout
    names = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"]])
def test_light_help_imports_neither_torch_nor_trl(argv):
    modules = imported_modules(*argv)
    assert "trl_variants" in modules  # the scan sees the package's own imports
    assert not {"torch", "trl", "transformers", "datasets"} & modules


def test_variant_help_is_grouped_command_then_config_then_trl_dataclasses(capsys):
    text = command_help(capsys, "dapo")
    headings = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert headings == [
        "options:",
        "options of the command (a flag or recipe key set to 'none' unsets an optional field):",
        "DAPOConfig:",
        "ModelConfig:",
        "DatasetMixtureConfig:",
    ]
    command_section = text.split("options of the command")[1].split("DAPOConfig:")[0]
    for flag in ("--reward_funcs", "--dataset_name", "--reasoning_gym_task"):
        assert flag in command_section
    config_section = text.split("DAPOConfig:")[1].split("ModelConfig:")[0]
    for flag in ("--overlong_buffer_length", "--epsilon_high", "--learning_rate"):
        assert flag in config_section
    assert "--use_peft" in text.split("ModelConfig:")[1]
    # The usage line is one line, not the 230-line list of every flag argparse writes by default, and the
    # description says how --config and --accelerate_config work.
    assert text.splitlines()[0].startswith("usage: trl-variants dapo [--config RECIPE.yaml]")
    assert "--accelerate_config NAME|PATH relaunches under `accelerate launch`" in " ".join(text.split())


def test_negated_switch_says_what_it_does(capsys):
    text = command_help(capsys, "dapo")
    negated = text.split("--no_dynamic_sampling, --no-dynamic-sampling")[1].split("--")[0]
    assert "Sets dynamic_sampling to False." in negated
    assert "(default: False)" not in negated


def test_help_only_options_do_not_change_parsing(tmp_path):
    """`--config` reaches TrlParser and `--accelerate_config` the launcher."""
    from trl_variants.cli.args import VARIANTS, parse_command
    from trl_variants.cli.launch import accelerate_launch_options

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model_name_or_path: m\nreward_funcs: [dapo_accuracy]\nepsilon_high: 0.3\n")
    parsed = parse_command(
        VARIANTS["dapo"],
        ["--config", str(recipe), "--accelerate_config", "zero2", "--output_dir", str(tmp_path), "--use_cpu", "true"],
        accelerate_launch_options(),
    )
    assert parsed.training_args.epsilon_high == 0.3
    assert parsed.launch_args == ["--accelerate_config", "zero2"]
