"""`--help` of every command: the light ones (`trl-variants --help`, the demo's) import neither torch nor TRL; a
training command's is TRL's parser's help over the same dataclasses as `trl grpo`'s, the variant's config in place of
`GRPOConfig`."""

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


def imported_full_names(argv: list[str], returncode: int) -> tuple[str, set[str]]:
    """The output and every module a real `python -m trl_variants.cli ARGV` process imports, from `-X importtime`."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "trl_variants.cli", *argv],
                            capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert result.returncode == returncode, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    names = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    return result.stdout + "\n".join(line for line in lines if not line.startswith("import time:")), names


@pytest.mark.slow  # two processes that import torch, transformers and TRL
@pytest.mark.parametrize(("argv", "returncode", "expected"), [
    (["dapo", "--help"], 0, "usage: trl-variants dapo"),
    (["dr-grpo", "--learning_rte", "1e-5"], 2, "trl-variants: error: unknown argument --learning_rte"),
])  # fmt: skip
def test_a_training_commands_help_and_mistakes_import_no_trainer(argv, returncode, expected):
    """They need TRL's parser and the config classes, as `trl grpo --help` does; the trainers (and the datasets,
    pandas and reward libraries `GRPOTrainer` brings, about a second of CPU time) load only for a run."""
    output, names = imported_full_names(argv, returncode)
    assert expected in output
    assert {"trl_variants.dapo.config", "trl_variants.dr_grpo.config", "trl.trainer.base_config"} <= names
    loaded = names & {"trl_variants.dapo.trainer", "trl_variants.dr_grpo.trainer", "trl.trainer.grpo_trainer",
                      "trl_variants.cli.train", "datasets", "pandas", "math_verify"}  # fmt: skip
    assert not loaded, loaded


def test_variant_help_lists_the_command_the_config_and_trl_dataclasses_fields(capsys):
    text = command_help(capsys, "dapo")
    for flag in ("--reward_funcs", "--dataset_name", "--reasoning_gym_task",  # the command's own
                 "--overlong_buffer_length", "--epsilon_high", "--learning_rate",  # DAPOConfig and its bases
                 "--use_peft", "--lora_r", "--datasets"):  # TRL's ModelConfig and DatasetMixtureConfig
        assert f"\n  {flag} " in text, flag
    # The usage line is one line, not the 230-line list of every flag argparse writes by default, and the
    # description says how --config and --accelerate_config work.
    assert text.splitlines()[0].startswith("usage: trl-variants dapo [--config RECIPE.yaml]")
    assert "--accelerate_config NAME|PATH relaunches under `accelerate launch`" in " ".join(text.split())


@pytest.mark.parametrize(("flags", "expected"), [([], "regenerate"), (["--dynamic_sampling", "false"], False),
                                                 (["--dynamic_sampling", "drop"], "drop"),
                                                 (["--dynamic_sampling", "True"], "regenerate")])  # fmt: skip
def test_dynamic_sampling_takes_its_mode_or_a_bool_on_the_command_line(tmp_path, capsys, flags, expected):
    from trl_variants.cli.args import VARIANTS, parse_command

    assert '"drop"' in " ".join(command_help(capsys, "dapo").split())
    argv = ["--model_name_or_path", "m", "--reward_funcs", "dapo_accuracy", "--output_dir", str(tmp_path),
            "--use_cpu", "true", *flags]  # fmt: skip
    assert parse_command(VARIANTS["dapo"], argv, {}).training_args.dynamic_sampling == expected


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
