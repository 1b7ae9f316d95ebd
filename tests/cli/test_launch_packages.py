"""An `--accelerate_config` whose `distributed_type` needs a package that is not installed (DeepSpeed for TRL's
zero1/zero2/zero3) is refused in one line naming the `deepspeed` extra, before `accelerate launch` starts;
without the check, it ends in an 18-line traceback. DeepSpeed is installed on some machines, so the
tests hide it: `sys.modules["deepspeed"] = None` is how Python marks a module as not importable."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trl_variants.cli import main
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.launch import build_launch_namespace, missing_launch_package_problem, relaunch

from .errors import one_error_line

REPO_ROOT = Path(__file__).resolve().parents[2]

WITHOUT_DEEPSPEED = """
import runpy, sys
sys.modules["deepspeed"] = None
sys.argv[0] = "trl-variants"
runpy.run_module("trl_variants.cli", run_name="__main__", alter_sys=True)
"""
EXTRA_LINE = 'needs deepspeed, which is not installed; install the tested version from this repository with `pip install ".[deepspeed]"'


def deepspeed_yaml(tmp_path):
    path = tmp_path / "my_zero.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n")
    return path


def training_flags(tmp_path) -> list[str]:
    return ["--model_name_or_path", "Qwen/Qwen2.5-0.5B", "--dataset_name", "openai/gsm8k", "--reward_funcs",
            "dapo_accuracy", "--output_dir", str(tmp_path / "out"), "--use_cpu", "true", "--bf16", "false"]  # fmt: skip


LAUNCHES = {
    "zero2 flag": lambda tmp_path: ["--accelerate_config", "zero2", "--num_processes", "2"],
    "zero3 inline": lambda tmp_path: ["--accelerate_config=zero3"],
    "own yaml": lambda tmp_path: ["--accelerate_config", str(deepspeed_yaml(tmp_path))],
    "recipe": lambda tmp_path: ["--config", str(write_recipe(tmp_path))],
}


def write_recipe(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("accelerate_config: zero1\nnum_processes: 2\n")
    return recipe


@pytest.mark.parametrize("launch", LAUNCHES)
def test_deepspeed_configs_without_deepspeed_name_the_extra_in_one_line(tmp_path, launch, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    assert main(["dapo", *LAUNCHES[launch](tmp_path), *training_flags(tmp_path)]) == 2
    assert EXTRA_LINE in one_error_line(capsys.readouterr().err)


@pytest.mark.slow
def test_in_a_real_process_it_is_one_line_on_stderr(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = ["dapo", *LAUNCHES["zero2 flag"](tmp_path), *training_flags(tmp_path)]
    result = subprocess.run([sys.executable, "-c", WITHOUT_DEEPSPEED, *argv], capture_output=True, text=True,
                            timeout=300, env=env)  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert EXTRA_LINE in one_error_line(result.stderr)
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, result.stderr[-3000:]


@pytest.mark.parametrize("launch_args", [["--accelerate_config", "zero2"], ["--accelerate_config=zero3"]])
def test_the_relaunch_refuses_it_alike(launch_args, monkeypatch):
    """`relaunch` refuses it before any process starts."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(CliUsageError, match=re.escape(EXTRA_LINE)):
        relaunch("dapo", launch_args, ["--output_dir", "out"])


def test_parsing_a_deepspeed_launch_needs_no_deepspeed(monkeypatch):
    """The launch is built (and every other part of the command checked) on a machine without DeepSpeed."""
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    namespace = build_launch_namespace("dapo", ["--accelerate_config", "zero2"], ["--output_dir", "out"])
    assert namespace.config_file.endswith("zero2.yaml")


@pytest.mark.parametrize("name", ["fsdp2", "multi_gpu", "single_gpu"])
def test_configs_that_need_nothing_more_pass(name, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    assert missing_launch_package_problem(name) is None


def test_an_installed_package_passes(tmp_path, monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    assert missing_launch_package_problem(str(deepspeed_yaml(tmp_path))) is None


def test_the_deepspeed_extra_pins_the_version_the_docs_say_was_tested():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (pin,) = pyproject["project"]["optional-dependencies"]["deepspeed"]
    version = pin.removeprefix("deepspeed==")
    assert f"DeepSpeed {version}" in (REPO_ROOT / "docs" / "multi_gpu.md").read_text()
    assert 'pip install -e ".[deepspeed]" torch==2.13.0' in (REPO_ROOT / ".ci" / "run").read_text()
