"""`trl-variants dapo ... --use_vllm true --vllm_mode colocate` on a local model folder and local data, run as the
installed command in a process of its own (which starts its own vLLM engine)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

LAUNCH_VARIABLES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}


def command() -> list[str]:
    """The installed `trl-variants` script beside this Python, or the module where the script is not there."""
    script = Path(sys.executable).with_name("trl-variants")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trl_variants.cli"]


def test_dapo_command_trains_with_vllm_colocate_on_local_data(vllm_policy, tmp_path):
    task, folder = vllm_policy
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"prompt": p["prompt"], "answer": p["answer"]} for p in task.train_problems]
    (data / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    output_dir = tmp_path / "out"
    argv = [
        *command(), "dapo",
        "--model_name_or_path", str(folder),
        "--dataset_name", str(data),
        "--reward_funcs", "dapo_accuracy",
        "--output_dir", str(output_dir),
        "--use_cpu", "true",
        "--use_vllm", "true",
        "--vllm_mode", "colocate",
        "--vllm_max_model_length", "64",
        "--per_device_train_batch_size", "16",
        "--num_generations", "4",
        "--max_completion_length", "6",
        "--max_steps", "2",
        "--logging_steps", "1",
        "--report_to", "none",
        "--save_strategy", "no",
    ]  # fmt: skip
    # TRL sets torch.distributed's variables in this process when it starts a colocate engine here; a command that
    # inherited them would take itself for one rank of a launch that does not exist.
    env = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    env.update(HF_HUB_OFFLINE="1", VLLM_LOGGING_LEVEL="INFO")
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    # vLLM started in colocate mode from the local folder, and TRL logged its importance-sampling metrics, which
    # exist only when completions come from vLLM.
    assert "external_launcher" in output and str(folder) in output, output[-4000:]
    assert "sampling/importance_sampling_ratio/mean" in output and "dynamic_sampling/rounds" in output
    assert (output_dir / "model.safetensors").is_file()
    assert "dapo" in (output_dir / "README.md").read_text()
