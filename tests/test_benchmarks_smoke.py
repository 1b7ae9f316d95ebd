"""The benchmark scripts run end to end in their smoke configuration and write their tables and plots. Each runs as
its reader runs it, `python -m benchmarks.<study>.<script>` from the repository root."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.overhead import overhead
from benchmarks.shared import settings
from trl_variants.machine import describe_machine
from trl_variants.toy import make_toy_task

REPO = Path(__file__).resolve().parent.parent
SCRIPT_TIMEOUT_S = 300
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_module(module: str, *args: str, smoke: bool = True) -> subprocess.CompletedProcess:
    """`python -m benchmarks.MODULE [--smoke] ARGS` from the repository root; fails the test if it fails."""
    result = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *(["--smoke"] if smoke else []), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
    )
    assert result.returncode == 0, f"{module} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def assert_png(path: Path) -> None:
    assert path.is_file(), f"missing plot {path.name}"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000, f"{path.name} is not a rendered PNG"


@pytest.mark.slow
def test_overhead_smoke_from_a_local_model_dir(tmp_path):
    task = make_toy_task(seed=0, max_operand=9, warm_start_steps=20)
    model_dir = tmp_path / "model"
    task.model.save_pretrained(model_dir)
    task.tokenizer.save_pretrained(model_dir)
    output_dir = tmp_path / "results"

    result = run_module("overhead.overhead", "--model_path", str(model_dir), "--output_dir", str(output_dir))

    assert "step-time ratio DAPOTrainer/GRPOTrainer:" in result.stdout
    report = json.loads((output_dir / "overhead.json").read_text())
    summary = report["summary"]
    assert summary["time_ratio"] > 0 and summary["cpu_time_ratio"] > 0
    assert len(summary["time_ratio_per_repeat"]) == len(summary["cpu_time_ratio_per_repeat"]) == report["repeats"]
    # The two arms run the same maths from the same seed, so the comparison is like for like.
    assert summary["max_loss_difference"] == 0.0 and summary["max_reward_difference"] == 0.0
    assert all(value is not None and value > 0 for values in summary["peak_memory_mib"].values() for value in values)
    sampling = summary["dynamic_sampling"]
    assert sampling["rounds_per_step"] >= 1
    assert 0 < sampling["fraction_phase1_generate"] < 1
    assert 0 <= sampling["fraction_bookkeeping_and_replay"] < 1
    # "drop" generates as GRPOTrainer does and masks the flat groups: its ratio is read against the same target.
    assert summary["drop_time_ratio"] > 0 and len(summary["drop_time_ratio_per_repeat"]) == report["repeats"]
    assert 0 <= summary["drop_kept_rows_frac"] <= 1
    markdown = (output_dir / "overhead.md").read_text()
    assert "Wall-time ratio" in markdown and "CPU-time ratio" in markdown
    assert 'Wall-time ratio DAPOTrainer (dynamic_sampling="drop") / GRPOTrainer' in markdown
    assert_png(output_dir / "overhead_step_times.png")


def test_use_vllm_puts_every_config_in_colocate_mode(tmp_path):
    shared = settings.training_kwargs(settings.SMOKE_SETTINGS, seed=0, use_vllm=True)
    configs = [overhead.arm_trainer_and_config(name, str(tmp_path), shared)[1] for name in overhead.ARMS]
    for config in configs:
        assert config.use_vllm and config.vllm_mode == "colocate", type(config).__name__


def test_settings_reject_a_batch_that_splits_a_group():
    cli = overhead.parse_args(["--smoke", "--batch_size", "6", "--num_generations", "4"])
    with pytest.raises(ValueError, match="--batch_size=6 must be a multiple of --num_generations=4"):
        settings.resolve_settings(cli, settings.TaskSettings())


@pytest.mark.slow
def test_dynamic_sampling_smoke_writes_its_report(tmp_path):
    output = tmp_path / "dynamic_sampling.md"
    result = run_module("dynamic_sampling_cost.dynamic_sampling", "--output", str(output))
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if line.startswith("| `")}
    assert list(rows) == ["`off`", "`ds`", "`carry`", "`carry+skip`"]
    text = output.read_text()
    assert "# Dynamic sampling benchmark" in text
    assert f"on {describe_machine()}." in text
    assert output.with_suffix(".json").exists()


@pytest.mark.slow
def test_generation_cost_smoke_counts_generation_per_informative_row(tmp_path):
    output = tmp_path / "generation_cost.md"
    run_module("dynamic_sampling_cost.generation_cost", "--output", str(output))
    saved = json.loads(output.with_suffix(".json").read_text())
    runs = saved["runs"]
    assert {run["dataset"] for run in runs} == {"mostly degenerate", "none degenerate", "drift"}
    for run in runs:
        assert 0 < run["informative_rows"] <= run["trained_rows"]
        assert run["generated_completions"] >= run["informative_rows"]
        if run["arm"] == "GRPOTrainer":  # GRPO trains exactly what it generates
            assert run["generated_completions"] == run["trained_rows"]
    # The report is rebuilt from the JSON alone.
    output.unlink()
    run_module("dynamic_sampling_cost.generation_cost", "--replot", "--output", str(output), smoke=False)
    assert "| mostly degenerate |" in output.read_text()


@pytest.mark.slow
def test_generation_memory_smoke_measures_real_calls_and_sizes_them(tmp_path):
    run_module("generation_memory.generation_memory", "--out", str(tmp_path))
    report = json.loads((tmp_path / "generation_memory_smoke.json").read_text())
    assert report["machine"] and len(report["results"]) == 2
    for result in report["results"]:
        # Real peaks were read, the plan was replayed for two rounds, and the largest fitting call was searched.
        assert result["floor_peak_mib"] > 0 and len(result["chosen_rows"]) == len(result["chosen_peak_mib"]) == 2
        assert all(rows >= result["floor_rows"] and rows % 8 == 0 for rows in result["chosen_rows"])
        assert result["largest_fitting_rows"] > 0
    assert (tmp_path / "generation_memory_smoke.md").read_text().startswith("# Generation memory")


@pytest.mark.slow
def test_cli_startup_smoke_times_the_three_commands_interleaved(tmp_path):
    run_module("cli_startup.startup", "--output_dir", str(tmp_path))
    report = json.loads((tmp_path / "cli_startup.json").read_text())
    assert report["repeats"] == 1 and report["machine"]["load average at end"]
    assert set(report["times"]) == {"trl grpo --help", "trl-variants dapo --help",
                                    "trl-variants dapo --learning_rte 1e-5"}  # fmt: skip
    for name, summary in report["summary"].items():
        assert summary["median_wall_s"] > 0 and summary["median_cpu_s"] > 0, name
    assert report["summary"]["trl grpo --help"]["ratio_of_medians"] == 1.0
    assert (tmp_path / "cli_startup.md").read_text().startswith("# Command-line start-up")
