"""Launching a script on two CPU processes under DeepSpeed ZeRO, as a user does with TRL's accelerate configs.

`accelerate launch --config_file <trl>/accelerate_configs/zero{2,3}.yaml --num_processes 2 --mixed_precision no`,
with `DS_ACCELERATOR=cpu` (DeepSpeed's CPU accelerator, gloo between the processes) and the training config's
`use_cpu=True`. `ACCELERATE_USE_CPU` must not be set: accelerate then drops DeepSpeed without a word (see
docs/multi_gpu.md). TRL's YAMLs ask for bf16, which these CPU runs replace by fp32, so that two sides computed
alike (rank against rank, resume against the uninterrupted run) compare exactly.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from ..helpers import free_port, run_launch

DEEPSPEED_MISSING = importlib.util.find_spec("deepspeed") is None
# Marks of every DeepSpeed test: .ci/run installs deepspeed after the README's command and runs these on their own.
deepspeed_test = [
    pytest.mark.deepspeed,
    pytest.mark.slow,
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        DEEPSPEED_MISSING, reason="deepspeed is not installed (pip install deepspeed==0.19.8; .ci/run installs it)"
    ),
]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def trl_accelerate_config(zero_stage: int) -> Path:
    """TRL's own accelerate config for ZeRO stage `zero_stage`, shipped in its wheel (what `trl grpo
    --accelerate_config zero3` uses)."""
    import trl

    return Path(trl.__file__).resolve().parent / "accelerate_configs" / f"zero{zero_stage}.yaml"


def run_zero(zero_stage: int, script: Path, out_dir: Path, timeout_s: float, *args, num_processes: int = 2) -> str:
    """Runs `script --out out_dir *args` on `num_processes` CPU processes under ZeRO stage `zero_stage`; fails the
    test on a crash, or on a hang past `timeout_s` (every process is then killed)."""
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(trl_accelerate_config(zero_stage)),
        "--num_processes", str(num_processes), "--mixed_precision", "no", "--main_process_ip", "127.0.0.1",
        "--main_process_port", str(free_port()), str(script), "--out", str(out_dir), *map(str, args),
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "ACCELERATE_USE_CPU"}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return run_launch(command, env, timeout_s)
