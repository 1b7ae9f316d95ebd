"""Launching a script on two CPU processes under FSDP, as a user does with TRL's accelerate configs.

`accelerate launch --config_file <trl>/accelerate_configs/fsdp{1,2}.yaml --num_processes 2 --mixed_precision no`,
with the training config's `use_cpu=True` and `ACCELERATE_USE_CPU` unset, as under DeepSpeed (tests/deepspeed). TRL's
YAMLs are read from the installed TRL at test time and changed only where CPU processes require it:

- FSDP1: `fsdp_sync_module_states: false` (torch refuses `True` on CPU: "FSDP parameter initialization with
  sync_module_states=True is not supported on cpu"), hence `fsdp_cpu_ram_efficient_loading: false` (`accelerate
  launch` refuses it without `sync_module_states`), `fsdp_use_orig_params: true` (TRL's YAML already says so) and
  the environment's `ACCELERATE_TORCH_DEVICE=cpu`;
- FSDP2: nothing.

Accelerate still builds no FSDP on CPU processes by itself: the training script (scripts/fsdp_runs.py) applies the
override that makes it, and says why.
"""

import os
from pathlib import Path

import pytest
import yaml

from ..helpers import accelerate_launch_command, launch_outcome, trl_accelerate_config

# Marks of every FSDP test; both make it slow (tests/conftest.py).
fsdp_test = [pytest.mark.fsdp, pytest.mark.multiprocess]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
CPU_CHANGES = {
    1: {
        "fsdp_sync_module_states": False, "fsdp_cpu_ram_efficient_loading": False, "fsdp_use_orig_params": True,
    },
    2: {},
}
CPU_ENVIRONMENT = {1: {"ACCELERATE_TORCH_DEVICE": "cpu"}, 2: {}}


def cpu_accelerate_config(version: int, folder: Path) -> Path:
    """TRL's `fsdp{version}.yaml`, changed only as CPU processes require, written to `folder`."""
    config = yaml.safe_load(trl_accelerate_config(f"fsdp{version}").read_text())
    assert config["distributed_type"] == "FSDP" and config["fsdp_config"]["fsdp_version"] == version
    config["fsdp_config"].update(CPU_CHANGES[version])
    path = folder / f"fsdp{version}_cpu.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def launch_fsdp(version: int, script: Path, out_dir: Path, timeout_s: float, *args) -> tuple[int, str]:
    """Runs `script --out out_dir *args` on two CPU processes under FSDP `version` and returns its exit status and
    output; fails the test on a hang past `timeout_s` (every process is then killed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    command = accelerate_launch_command(cpu_accelerate_config(version, out_dir), script, "--out", out_dir, *args)
    env = {key: value for key, value in os.environ.items() if key != "ACCELERATE_USE_CPU"}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **CPU_ENVIRONMENT[version])
    return launch_outcome(command, env, timeout_s)


def run_fsdp(version: int, script: Path, out_dir: Path, timeout_s: float, *args) -> str:
    """`launch_fsdp` that must succeed: fails the test on a crash too."""
    returncode, output = launch_fsdp(version, script, out_dir, timeout_s, *args)
    assert returncode == 0, output[-4000:]
    return output
