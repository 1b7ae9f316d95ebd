"""The GPU-speed study (benchmarks/gpu_speed) at its tiny CPU size: every arm trains, writes its JSON line and its
table row, and the figures hang together. No timing is checked: speed is what the study measures on a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_variants.toy.tokenizer import build_char_tokenizer

REPO = Path(__file__).resolve().parents[1]
ARMS = ["grpo", "dapo_as_published", "dapo_defaults", "dr_grpo", "dapo_defaults_batch_calls"]
TRAINED_ROWS = 4 * 2  # the tiny preset's per_device_train_batch_size * gradient_accumulation_steps


@pytest.mark.slow
def test_every_arm_runs_at_the_tiny_size_and_reports_its_figures(tmp_path):
    # The smoke test travels without SmolLM2's tokenizer: any tokenizer folder does, the toy task's here.
    tokenizer = tmp_path / "tokenizer"
    build_char_tokenizer().save_pretrained(tokenizer)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "benchmarks.gpu_speed.run", "--tiny", "--tokenizer", str(tokenizer), "--output-dir", str(out),
               "--warmup-steps", "1", "--steps", "1", "--prompts", "256", "--arms", *ARMS]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]

    results = {line["arm"]: line for line in map(json.loads, (out / "arms.jsonl").read_text().splitlines())}
    assert list(results) == ARMS
    for arm, result in results.items():
        assert result["steps_measured"] == 1 and result["s_per_step"] > 0, arm
        assert result["peak_gpu_memory_gib"] is None, arm
        assert 0 < result["generation_share"] < 1, arm
        assert 0 <= result["informative_rows_per_step"] <= TRAINED_ROWS, arm
    for arm in ("grpo", "dr_grpo"):
        # One generation batch per step, in one generate call.
        assert results[arm]["completions_per_step"] == TRAINED_ROWS
        assert results[arm]["generate_calls_per_step"] == 1
    for arm in ("dapo_as_published", "dapo_defaults"):
        # One generate call per round, however many rows the round holds.
        assert results[arm]["generate_calls_per_step"] == results[arm]["rounds_per_step"], arm
    batch_calls = results["dapo_defaults_batch_calls"]
    assert batch_calls["generate_calls_per_step"] >= batch_calls["completions_per_step"] / TRAINED_ROWS

    table = (out / "table.md").read_text()
    assert "cores" in table.splitlines()[0]  # the machine that printed it
    for arm in ARMS:
        assert f"| {results[arm]['label']} |" in table
