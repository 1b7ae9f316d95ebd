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
               "--warmup-steps", "1", "--steps", "1", "--prompts", "256", "--arms", *ARMS,
               "--curve-rows", "4", "8", "16"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]

    results = {line["arm"]: line for line in map(json.loads, (out / "arms.jsonl").read_text().splitlines())}
    assert list(results) == ARMS
    for arm, result in results.items():
        assert result["steps_measured"] == 1 and result["s_per_step"] > 0, arm
        assert result["peak_gpu_memory_gib"] is None, arm
        # No memory reading on CPU, so no plan; and no out-of-memory error.
        assert result["planned_rows_per_call"] is None and result["rows_per_call_after_oom"] is None, arm
        # Rows end at drawn lengths, most of them before the limit.
        assert result["mean_completion_length"] < 8, arm
        (step,) = result["steps"]
        assert sum(rows for rows, _ in step["calls"]) == step["generated_rows"] and len(step["calls"]) == step["generate_calls"]
        assert 0 < result["generation_share"] < 1, arm
        assert 0 <= result["informative_rows_per_step"] <= TRAINED_ROWS, arm
    for arm in ("grpo", "dr_grpo"):
        # One generation batch per step, in one generate call.
        assert results[arm]["completions_per_step"] == TRAINED_ROWS
        assert results[arm]["generate_calls_per_step"] == 1
        # Every group is trained: the expected informative rows are the reward's share of them.
        assert results[arm]["s_per_expected_informative_row"] > 0
    assert all(results[arm]["s_per_expected_informative_row"] is None for arm in ARMS if arm.startswith("dapo"))
    for arm in ("dapo_as_published", "dapo_defaults"):
        # One generate call per round, however many rows the round holds.
        assert results[arm]["generate_calls_per_step"] == results[arm]["rounds_per_step"], arm
    batch_calls = results["dapo_defaults_batch_calls"]
    assert batch_calls["generate_calls_per_step"] >= batch_calls["completions_per_step"] / TRAINED_ROWS

    # The cost model predicts from the curve this run measured.
    assert json.loads((out / "curve.json").read_text())["rows"] == [4, 8, 16]
    cost = subprocess.run([sys.executable, "-m", "benchmarks.gpu_speed.cost_model", "--curve-json", str(out / "curve.json"),
                           "--batch-groups", "2", "--group-size", "4", "--steps", "200"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert cost.returncode == 0, cost.stderr[-4000:]
    assert "| grpo |" in cost.stdout and "| dapo_defaults |" in cost.stdout and "to be checked by the GPU study" in cost.stdout

    table = (out / "table.md").read_text()
    assert "cores" in table.splitlines()[0]  # the machine that printed it
    for arm in ARMS:
        assert f"| {results[arm]['label']} |" in table
