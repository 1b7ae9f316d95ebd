"""The benchmark scripts run end to end in their smoke configuration and write their tables and plots."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trl_variants.toy import make_toy_task

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
SCRIPT_TIMEOUT_S = 300
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), "--smoke", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def assert_png(path: Path) -> None:
    assert path.is_file(), f"missing plot {path.name}"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000, f"{path.name} is not a rendered PNG"


def test_compare_variants_smoke_writes_table_and_plots(tmp_path):
    run_script("compare_variants.py", "--output_dir", str(tmp_path))

    report = json.loads((tmp_path / "variants.json").read_text())
    runs = {run["variant"]: run for run in report["runs"]}
    assert set(runs) == {"grpo", "dapo", "dapo_dynamic_sampling", "dr_grpo"}
    steps = report["settings"]["max_steps"]
    for run in runs.values():
        assert run["eval_steps"] == list(range(steps + 1))
        assert all(0.0 <= accuracy <= 1.0 for accuracy in run["accuracy"])
        assert len(run["step_seconds"]) == steps
        # Every step samples the whole batch at least once.
        batch = report["settings"]["batch_size"]
        assert run["generated_completions"] >= steps * batch
        assert run["generated_tokens"] == sorted(run["generated_tokens"]) and run["generated_tokens"][-1] > 0
    # All variants start from the same policy, so they agree before the first step.
    assert len({run["accuracy"][0] for run in runs.values()}) == 1
    sampled = runs["dapo_dynamic_sampling"]
    assert len(sampled["rounds"]) == steps and all(rounds >= 1 for rounds in sampled["rounds"])
    assert runs["dapo"]["rounds"] == []
    # Dynamic sampling's extra rounds are counted as generated tokens.
    extra_rounds = sum(rounds - 1 for rounds in sampled["rounds"])
    if extra_rounds:
        assert sampled["generated_completions"] > runs["dapo"]["generated_completions"]

    table = (tmp_path / "variants.md").read_text()
    for label in report["variants"].values():
        assert f"| {label} |" in table
    for plot in ("accuracy_vs_step.png", "accuracy_vs_tokens.png", "completion_length.png", "dynamic_sampling.png"):
        assert_png(tmp_path / plot)
        assert f"]({plot})" in table


def test_overhead_smoke_from_a_local_model_dir(tmp_path):
    task = make_toy_task(seed=0, max_operand=9, warm_start_steps=20)
    model_dir = tmp_path / "model"
    task.model.save_pretrained(model_dir)
    task.tokenizer.save_pretrained(model_dir)
    output_dir = tmp_path / "results"

    result = run_script("overhead.py", "--model_path", str(model_dir), "--output_dir", str(output_dir))

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
    markdown = (output_dir / "overhead.md").read_text()
    assert "Wall-time ratio" in markdown and "CPU-time ratio" in markdown
    assert_png(output_dir / "overhead_step_times.png")


@pytest.fixture
def benchmark_modules(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import common
    import compare_variants
    import overhead

    return common, compare_variants, overhead


def test_use_vllm_puts_every_config_in_colocate_mode(benchmark_modules, tmp_path):
    common, compare_variants, overhead = benchmark_modules
    shared = common.training_kwargs(common.SMOKE_SETTINGS, seed=0, use_vllm=True)
    configs = [compare_variants.variant_trainer_and_config(name, str(tmp_path), shared)[1] for name in compare_variants.VARIANTS]
    configs += [overhead.arm_trainer_and_config(name, str(tmp_path), shared)[1] for name in overhead.ARMS]
    for config in configs:
        assert config.use_vllm and config.vllm_mode == "colocate", type(config).__name__


def test_settings_reject_a_batch_that_splits_a_group(benchmark_modules):
    common, compare_variants, _ = benchmark_modules
    cli = compare_variants.parse_args(["--smoke", "--batch_size", "6", "--num_generations", "4"])
    with pytest.raises(ValueError, match="--batch_size=6 must be a multiple of --num_generations=4"):
        common.resolve_settings(cli, common.TaskSettings())
