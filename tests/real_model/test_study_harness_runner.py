"""The study harness's runner end to end on SmolLM2 at its smoke size (two updates per generation batch), through the
example study: a `defaults` run killed after its first generation-batch checkpoint and started again resumes from
it and records exactly what an uninterrupted run records, read on both sides of its budget."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.test_benchmarks_smoke import REPO

# A step of its own in .ci/run: three runs of the real model would add minutes to the README's command.
pytestmark = [pytest.mark.real_model, pytest.mark.study_runner]

COMPARED = ("evaluations", "probe", "logged", "train_indices", "complete", "max_visits")


def command(runs_dir):
    return [sys.executable, "-m", "benchmarks.study_harness.example", "run", "--arm", "defaults", "--seed", "1",
            "--smoke", "--runs_dir", str(runs_dir)]


def run(runs_dir):
    result = subprocess.run(command(runs_dir), cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def without_seconds(points):
    """Evaluation points without their clocks, which no two runs share."""
    def clockless(value):
        if isinstance(value, dict):
            return {key: clockless(item) for key, item in value.items() if "seconds" not in key}
        return value

    return [clockless(point) for point in points]


def test_a_run_killed_after_a_boundary_checkpoint_resumes_to_the_uninterrupted_record(smollm2_path, tmp_path):
    interrupted, whole = tmp_path / "interrupted", tmp_path / "whole"
    process = subprocess.Popen(command(interrupted), cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = interrupted / "checkpoints" / "defaults-seed1" / "checkpoint-2" / "trainer_state.json"
    deadline = time.time() + 600
    while not state.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # the checkpoint's last files
    process.kill()
    process.wait()
    stopped = json.loads((interrupted / "defaults-seed1.json").read_text())
    assert not stopped["complete"], "the run ended before it could be interrupted"
    assert "complete=True" in run(interrupted)
    assert "complete=True" in run(whole)
    resumed = json.loads((interrupted / "defaults-seed1.json").read_text())
    uninterrupted = json.loads((whole / "defaults-seed1.json").read_text())
    for record in (resumed, uninterrupted):
        record["evaluations"] = without_seconds(record["evaluations"])
    assert {key: resumed[key] for key in COMPARED} == {key: uninterrupted[key] for key in COMPARED}
    assert [attempt["resumed_from_step"] for attempt in resumed["attempts"]] == [0, 2]
    readings = {point["side"]: point["tokens"] for point in resumed["evaluations"] if point["kind"] == "budget"}
    assert readings["below"] <= 20 and readings.get("above", 21) > 20
    assert any(point["kind"] == "fixed_step" for point in resumed["evaluations"])
    assert "clip_ratio/high_mean" in resumed["logged"]
    assert not (interrupted / "checkpoints" / "defaults-seed1").exists()
