"""Launching a script on two CPU processes under DeepSpeed ZeRO, as a user does with TRL's accelerate configs.

`accelerate launch --config_file <trl>/accelerate_configs/zero{2,3}.yaml --num_processes 2 --mixed_precision no`,
with `DS_ACCELERATOR=cpu` (DeepSpeed's CPU accelerator, gloo between the processes) and the training config's
`use_cpu=True`. `ACCELERATE_USE_CPU` must not be set: accelerate then drops DeepSpeed without a word (see
docs/multi_gpu.md).
"""

import importlib.util
import os
from pathlib import Path

import pytest

from ..helpers import accelerate_launch_command, run_launch, trl_accelerate_config

DEEPSPEED_MISSING = importlib.util.find_spec("deepspeed") is None
# Marks of every DeepSpeed test: .ci/run installs deepspeed after the README's command and runs these on their own.
deepspeed_test = [
    pytest.mark.deepspeed,
    pytest.mark.slow,
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        DEEPSPEED_MISSING, reason="deepspeed is not installed (pip install \".[deepspeed]\"; .ci/run installs it)"
    ),
]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_zero(zero_stage: int, script: Path, out_dir: Path, timeout_s: float, *args, num_processes: int = 2) -> str:
    """Runs `script --out out_dir *args` on `num_processes` CPU processes under ZeRO stage `zero_stage`; fails the test on a
    crash, or on a hang past `timeout_s` (every process is then killed)."""
    config = trl_accelerate_config(f"zero{zero_stage}")
    command = accelerate_launch_command(config, script, "--out", out_dir, *args, num_processes=num_processes)
    env = {key: value for key, value in os.environ.items() if key != "ACCELERATE_USE_CPU"}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return run_launch(command, env, timeout_s)
