"""What `DAPOTrainer` costs per step against TRL's `GRPOTrainer` doing the same maths, and what dynamic sampling
costs beyond the extra generation it asks for.

Three arms train from the same policy with the same seed and data:
- `grpo`: TRL's `GRPOTrainer` with DAPO's effective settings (`loss_type="dapo"`, `epsilon=0.2`,
  `epsilon_high=0.28`, `scale_rewards="group"`, `beta=0`, no truncation masking);
- `dapo`: `DAPOTrainer` with `dynamic_sampling=False` (the same maths, so the trajectories should match);
- `dapo_dynamic_sampling`: `DAPOTrainer` with dynamic sampling as published (skipping and carrying off),
  instrumented with phase timers;
- `dapo_drop`: `DAPOTrainer` with `dynamic_sampling="drop"`: the same generation as `grpo` (one batch per step),
  flat groups masked out of the loss, so its step should cost what `grpo`'s does (its ratio's target is the same).

The arms run as alternating short runs in one process (order reversed every repeat), so machine drift hits all of
them alike; the first step of every run is left out as warm-up. Peak memory is measured in separate alternating
runs, because the memory sampler's thread would otherwise add noise to the timings.

    python -m benchmarks.overhead.overhead            # full CPU run; output in benchmarks/overhead/results
    python -m benchmarks.overhead.overhead --smoke    # a few steps
"""

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from benchmarks.shared.instruments import PeakMemory, PhaseTimer, StepTimer  # noqa: E402
from benchmarks.shared.output import (  # noqa: E402
    command_line, load_average, machine_description, machine_markdown, markdown_table, write_json,
)  # fmt: skip
from benchmarks.shared.policy import build_trainer, load_policy  # noqa: E402
from benchmarks.shared.settings import (  # noqa: E402
    DAPO_AS_PUBLISHED, TaskSettings, add_common_arguments, configure_runtime, configure_vllm, resolve_settings,
    training_kwargs,
)  # fmt: skip
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"

ARMS = {
    "grpo": 'TRL GRPOTrainer (loss_type="dapo", epsilon_high=0.28)',
    "dapo": "DAPOTrainer, dynamic_sampling=False",
    "dapo_dynamic_sampling": "DAPOTrainer, dynamic_sampling=True",
    "dapo_drop": 'DAPOTrainer, dynamic_sampling="drop"',
}
PHASE_ONE = "sample_batch"
TARGET_RATIO = 1.02


def arm_trainer_and_config(arm: str, output_dir: str, shared: dict):
    if arm == "grpo":
        config = GRPOConfig(
            output_dir,
            loss_type="dapo",
            epsilon=0.2,
            epsilon_high=0.28,
            scale_rewards="group",
            mask_truncated_completions=False,
            **shared,
        )
        return GRPOTrainer, config
    if arm == "dapo":
        return DAPOTrainer, DAPOConfig(output_dir, dynamic_sampling=False, **shared)
    if arm == "dapo_dynamic_sampling":
        return DAPOTrainer, DAPOConfig(output_dir, dynamic_sampling=True, **DAPO_AS_PUBLISHED, **shared)
    if arm == "dapo_drop":
        return DAPOTrainer, DAPOConfig(output_dir, dynamic_sampling="drop", **shared)
    raise ValueError(f"arm={arm!r} is not allowed; expected one of {sorted(ARMS)}.")


def instrument_dynamic_sampling(trainer, reward_funcs) -> PhaseTimer:
    """Times phase 1 (generation rounds and the keep/drop decision), the `_generate` calls inside and outside
    it (outside = phase 2's replay of the kept completions) and the reward functions."""
    timer = PhaseTimer()
    in_phase_one = lambda t: PHASE_ONE in t.active  # noqa: E731
    timer.wrap_method(trainer.dynamic_sampler, PHASE_ONE, "phase1_total")
    timer.wrap_method(trainer, "_generate", lambda t: "phase1_generate" if in_phase_one(t) else "phase2_replay")
    # TRL calls the reward functions from its list; the timed copies keep their names, so nothing else changes.
    trainer.reward_funcs = [
        timer.timed(func, lambda t: "phase1_rewards" if in_phase_one(t) else "phase2_rewards") for func in reward_funcs
    ]
    return timer


def run_arm(arm: str, policy, settings: TaskSettings, cli, scratch: str, measure_memory: bool) -> dict:
    shared = training_kwargs(settings, cli.seed, cli.use_vllm)
    trainer_class, config = arm_trainer_and_config(arm, os.path.join(scratch, arm), shared)
    timer = StepTimer()
    trainer = build_trainer(trainer_class, config, policy, callbacks=[timer])
    phases = None
    if arm == "dapo_dynamic_sampling" and not measure_memory:
        phases = instrument_dynamic_sampling(trainer, trainer.reward_funcs)
    memory = PeakMemory() if measure_memory else None
    if memory:
        memory.start()
    else:
        gc.collect()  # so that no arm pays for collecting an earlier arm's garbage inside its timed steps
    trainer.train()
    history = trainer.state.log_history
    return {
        "arm": arm,
        "step_seconds": timer.durations[1:],
        "step_cpu_seconds": timer.cpu_durations[1:],
        "peak_memory_mib": memory.stop() if memory else None,
        "phase_seconds": dict(phases.seconds) if phases else None,
        "all_step_seconds": timer.durations,
        "loss": [entry["loss"] for entry in history if "loss" in entry],
        "reward": [entry["reward"] for entry in history if "reward" in entry],
        "rounds": [entry[key] for entry in history for key in ["dynamic_sampling/rounds"] if key in entry],
        "pass_rate": [entry[key] for entry in history for key in ["dynamic_sampling/pass_rate"] if key in entry],
        "kept_rows_frac": [entry[key] for entry in history for key in ["dynamic_sampling/kept_rows_frac"]
                           if key in entry],
    }


def alternating(arms: list[str], repeats: int):
    for repeat in range(repeats):
        yield repeat, (arms if repeat % 2 == 0 else arms[::-1])


def summarize(timing_runs: list[dict], memory_runs: list[dict], arms: list[str]) -> dict:
    def runs_of(arm, runs):
        return [run for run in runs if run["arm"] == arm]

    def paired_ratios(key, arm="dapo"):
        # Per run, the median step (robust to another process's load spike); then the arm over GRPO per repeat.
        per_run = {name: [statistics.median(run[key]) for run in runs_of(name, timing_runs)] for name in (arm, "grpo")}
        return [value / grpo for value, grpo in zip(per_run[arm], per_run["grpo"], strict=True)]

    wall_ratios, cpu_ratios = paired_ratios("step_seconds"), paired_ratios("step_cpu_seconds")
    summary = {
        "median_step_seconds": {
            arm: statistics.median(s for run in runs_of(arm, timing_runs) for s in run["step_seconds"]) for arm in arms
        },
        "median_step_cpu_seconds": {
            arm: statistics.median(s for run in runs_of(arm, timing_runs) for s in run["step_cpu_seconds"])
            for arm in arms
        },
        "time_ratio": statistics.median(wall_ratios),
        "time_ratio_per_repeat": wall_ratios,
        "cpu_time_ratio": statistics.median(cpu_ratios),
        "cpu_time_ratio_per_repeat": cpu_ratios,
        "peak_memory_mib": {arm: [run["peak_memory_mib"] for run in runs_of(arm, memory_runs)] for arm in arms},
    }
    if "dapo_drop" in arms:
        for name, key in (("drop_time_ratio", "step_seconds"), ("drop_cpu_time_ratio", "step_cpu_seconds")):
            summary[f"{name}_per_repeat"] = paired_ratios(key, "dapo_drop")
            summary[name] = statistics.median(summary[f"{name}_per_repeat"])
        summary["drop_kept_rows_frac"] = statistics.fmean(
            value for run in runs_of("dapo_drop", timing_runs) for value in run["kept_rows_frac"]
        )
    peaks = summary["peak_memory_mib"]
    if all(value is not None for arm in ("dapo", "grpo") for value in peaks[arm]) and peaks["grpo"]:
        summary["memory_ratio"] = statistics.median(peaks["dapo"]) / statistics.median(peaks["grpo"])
    grpo_first, dapo_first = runs_of("grpo", timing_runs)[0], runs_of("dapo", timing_runs)[0]
    summary["max_loss_difference"] = max(
        (abs(a - b) for a, b in zip(grpo_first["loss"], dapo_first["loss"], strict=True)), default=0.0
    )
    summary["max_reward_difference"] = max(
        (abs(a - b) for a, b in zip(grpo_first["reward"], dapo_first["reward"], strict=True)), default=0.0
    )
    sampled = runs_of("dapo_dynamic_sampling", timing_runs)
    if sampled:
        # Phase timers run through every step, the first included, so the shares are taken of all steps' time.
        steps = sum(len(run["all_step_seconds"]) for run in sampled)
        step_total = sum(sum(run["all_step_seconds"]) for run in sampled)
        phase = {}
        for run in sampled:
            for name, seconds in run["phase_seconds"].items():
                phase[name] = phase.get(name, 0.0) + seconds
        bookkeeping = phase.get("phase1_total", 0.0) - phase.get("phase1_generate", 0.0) - phase.get("phase1_rewards", 0.0)
        summary["dynamic_sampling"] = {
            "step_seconds": step_total / steps,
            "step_ratio_to_dapo": statistics.median(s for run in sampled for s in run["step_seconds"])
            / summary["median_step_seconds"]["dapo"],
            "fraction_phase1_generate": phase.get("phase1_generate", 0.0) / step_total,
            "fraction_phase1_rewards": phase.get("phase1_rewards", 0.0) / step_total,
            "fraction_bookkeeping": bookkeeping / step_total,
            "fraction_replay": phase.get("phase2_replay", 0.0) / step_total,
            "fraction_bookkeeping_and_replay": (bookkeeping + phase.get("phase2_replay", 0.0)) / step_total,
            "rounds_per_step": statistics.fmean(value for run in sampled for value in run["rounds"]),
            "pass_rate": statistics.fmean(value for run in sampled for value in run["pass_rate"]),
        }
    return summary


def report_markdown(report: dict) -> str:
    summary, arms = report["summary"], report["arms"]
    peaks = summary["peak_memory_mib"]

    def peak(arm):
        # The range, not only the median: a run's peak can include a few MiB of a torch kernel's scratch memory or
        # not, depending on the CPU's instruction set and on the arm's tensor shapes (docs/benchmarks.md).
        values = [value for value in peaks[arm] if value is not None]
        return f"{statistics.median(values):.1f} ({min(values):.1f}..{max(values):.1f})" if values else "n/a"

    table = markdown_table(
        [
            "arm",
            "median wall s/step",
            "median CPU s/step",
            f"peak memory above start, MiB, median (range) ({report['memory_kind']})",
        ],
        [
            [
                ARMS[arm],
                f"{summary['median_step_seconds'][arm]:.4f}",
                f"{summary['median_step_cpu_seconds'][arm]:.4f}",
                peak(arm),
            ]
            for arm in arms
        ],
    )

    def ratio_line(name, key, arm="dynamic_sampling=False"):
        values = sorted(summary[f"{key}_per_repeat"])
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        return (
            f"**{name} ratio DAPOTrainer ({arm}) / GRPOTrainer: {summary[key]:.3f}** (median over "
            f"{len(values)} repeats; interquartile range {quartiles[0]:.3f}..{quartiles[2]:.3f}; target <= {TARGET_RATIO})."
        )

    lines = [
        "# Overhead of DAPOTrainer against TRL's GRPOTrainer",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {machine_markdown(report['machine'])}. Total wall time {report['total_seconds']:.0f} s.",
        "",
        f"Settings: {', '.join(f'{k}={v}' for k, v in report['settings'].items())}; seed {report['seed']}; "
        f"{report['repeats']} alternating repeats of {report['settings']['max_steps']} steps per arm (first step of "
        f"each run left out); {report['memory_repeats']} alternating memory repeats.",
        "",
        ratio_line("Wall-time", "time_ratio"),
        "",
        ratio_line("CPU-time", "cpu_time_ratio"),
        "",
        *([ratio_line("Wall-time", "drop_time_ratio", 'dynamic_sampling="drop"'), "",
           ratio_line("CPU-time", "drop_cpu_time_ratio", 'dynamic_sampling="drop"'), "",
           f"With \"drop\" the share of rows kept in the loss averaged {summary['drop_kept_rows_frac']:.2f}; the "
           "generation is `GRPOTrainer`'s.", ""] if "drop_time_ratio" in summary else []),
        f"Peak-memory ratio: {summary['memory_ratio']:.3f}." if "memory_ratio" in summary else "Peak memory: n/a.",
        "",
        f"Same trajectories: largest per-step difference in loss {summary['max_loss_difference']:.2e}, "
        f"in mean reward {summary['max_reward_difference']:.2e}.",
        "",
        table,
        "",
    ]
    sampling = summary.get("dynamic_sampling")
    if sampling:
        lines += [
            "## Dynamic sampling",
            "",
            f"Median step {summary['median_step_seconds']['dapo_dynamic_sampling']:.4f} s wall, "
            f"{sampling['step_ratio_to_dapo']:.2f}x the median step without dynamic sampling; {sampling['rounds_per_step']:.2f} generation rounds per step, pass rate "
            f"{sampling['pass_rate']:.2f}. Shares of the dynamic-sampling step time:",
            "",
            markdown_table(
                ["phase", "share of step time"],
                [
                    ["phase 1 generation (TRL `_generate`, every round)", f"{sampling['fraction_phase1_generate']:.3f}"],
                    ["phase 1 reward functions", f"{sampling['fraction_phase1_rewards']:.3f}"],
                    ["bookkeeping (phase 1 outside generation and rewards)", f"{sampling['fraction_bookkeeping']:.3f}"],
                    ["replay (phase 2 `_generate` on the kept completions)", f"{sampling['fraction_replay']:.3f}"],
                    ["**bookkeeping + replay**", f"**{sampling['fraction_bookkeeping_and_replay']:.3f}**"],
                ],
            ),
            "",
        ]
    lines.append("![step times](overhead_step_times.png)")
    return "\n".join(lines) + "\n"


def plot_step_times(report: dict, path: str) -> None:
    arms, summary = report["arms"], report["summary"]
    labels = [ARMS[arm].replace(" (", "\n(").replace(", ", ",\n") for arm in arms]
    figure, panels = plt.subplots(1, 2, figsize=(12, 4.8))
    for axes, key, name, ratio in (
        (panels[0], "step_seconds", "wall", summary["time_ratio"]),
        (panels[1], "step_cpu_seconds", "CPU", summary["cpu_time_ratio"]),
    ):
        data = [[s for run in report["timing_runs"] if run["arm"] == arm for s in run[key]] for arm in arms]
        axes.boxplot(data, showfliers=False)
        axes.set_xticks(range(1, len(arms) + 1), labels, fontsize=8)
        axes.set(ylabel=f"{name} seconds per step", title=f"Per-step {name} time; DAPO/GRPO ratio {ratio:.3f}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, TaskSettings(max_steps=31), RESULTS_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=None, help="alternating timing repeats per arm (default 20)")
    parser.add_argument("--memory_repeats", type=int, default=None, help="alternating memory repeats (default 2)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    cli = parser.parse_args(argv)
    cli.repeats = cli.repeats or (2 if cli.smoke else 20)
    cli.memory_repeats = cli.memory_repeats or (1 if cli.smoke else 2)
    for needed in ("grpo", "dapo"):
        if needed not in cli.arms:
            parser.error(f"--arms must include {needed!r}: the ratio compares dapo with grpo")
    return cli


def main(argv=None) -> int:
    cli = parse_args(argv)
    settings = resolve_settings(cli, TaskSettings(max_steps=31))
    if settings.max_steps < 2:
        raise ValueError(f"--max_steps={settings.max_steps} must be >= 2 (the first step of each run is warm-up).")
    configure_runtime(cli.num_threads)
    configure_vllm(cli.use_vllm)
    os.makedirs(cli.output_dir, exist_ok=True)
    started, load_at_start = time.perf_counter(), load_average()
    policy = load_policy(cli.seed, settings, cli.model_path, cli.use_vllm)
    timing_runs, memory_runs = [], []
    with tempfile.TemporaryDirectory(prefix="overhead_") as scratch:
        for repeat, order in alternating(cli.arms, cli.repeats):
            for arm in order:
                timing_runs.append(run_arm(arm, policy, settings, cli, scratch, measure_memory=False))
            print(f"timing repeat {repeat + 1}/{cli.repeats} done", flush=True)
        for _, order in alternating(cli.arms, cli.memory_repeats):
            for arm in order:
                memory_runs.append(run_arm(arm, policy, settings, cli, scratch, measure_memory=True))
    report = {
        "command": command_line(__spec__.name, argv),
        "settings": vars(settings),
        "seed": cli.seed,
        "repeats": cli.repeats,
        "memory_repeats": cli.memory_repeats,
        "arms": cli.arms,
        "memory_kind": PeakMemory().kind,
        "machine": machine_description(cli.num_threads, load_at_start),
        "total_seconds": time.perf_counter() - started,
        "summary": summarize(timing_runs, memory_runs, cli.arms),
        "timing_runs": timing_runs,
        "memory_runs": memory_runs,
    }
    write_json(report, os.path.join(cli.output_dir, "overhead.json"))
    plot_step_times(report, os.path.join(cli.output_dir, "overhead_step_times.png"))
    markdown = report_markdown(report)
    with open(os.path.join(cli.output_dir, "overhead.md"), "w") as handle:
        handle.write(markdown)
    print(markdown)
    summary = report["summary"]
    print(
        f"step-time ratio DAPOTrainer/GRPOTrainer: wall {summary['time_ratio']:.3f}, "
        f"CPU {summary['cpu_time_ratio']:.3f} (target <= {TARGET_RATIO})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
