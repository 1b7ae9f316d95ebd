"""Naive GRPO, DAPO (with and without dynamic sampling) and Dr.GRPO side by side on the toy task.

Every variant starts from the same warm-started policy and trains on the same prompts with the same seed, batch,
number of generations and learning rate; only the algorithm's own settings differ. For each variant it reports
held-out greedy accuracy per optimizer step (mean and spread over seeds), steps to a target accuracy, accuracy per
generated completion token, mean completion length, wall time per step and, for dynamic sampling, the generation
rounds per step and the pass rate. Writes `variants.md`, `variants.json` and PNG plots into `--output_dir`.

    python benchmarks/compare_variants.py             # full CPU run
    python benchmarks/compare_variants.py --smoke     # a few steps, one seed
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402
from common import (  # noqa: E402
    GenerationCounter,
    Policy,
    StepTimer,
    TaskSettings,
    add_common_arguments,
    build_trainer,
    configure_runtime,
    load_policy,
    load_average,
    machine_description,
    machine_markdown,
    markdown_table,
    resolve_settings,
    training_kwargs,
    write_json,
)
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer  # noqa: E402

VARIANTS = {
    "grpo": "naive GRPO (TRL)",
    "dapo": "DAPO, no dynamic sampling",
    "dapo_dynamic_sampling": "DAPO + dynamic sampling",
    "dr_grpo": "Dr.GRPO",
}
DEFAULT_SEEDS = [0, 1, 2, 3, 4]
DEFAULT_EVAL_EVERY = 10
DEFAULT_TARGET_ACCURACY = 0.40


def variant_trainer_and_config(variant: str, output_dir: str, shared: dict):
    """The trainer class and config of one variant; `shared` holds the fields every variant gets unchanged."""
    if variant == "grpo":
        # The original GRPO objective: sequence-mean loss, symmetric clip, std-normalised group advantages.
        config = GRPOConfig(output_dir, loss_type="grpo", epsilon=0.2, epsilon_high=None, scale_rewards="group", **shared)
        return GRPOTrainer, config
    if variant == "dapo":
        return DAPOTrainer, DAPOConfig(output_dir, dynamic_sampling=False, **shared)
    if variant == "dapo_dynamic_sampling":
        return DAPOTrainer, DAPOConfig(output_dir, dynamic_sampling=True, **shared)
    if variant == "dr_grpo":
        return DrGRPOTrainer, DrGRPOConfig(output_dir, **shared)
    raise ValueError(f"variant={variant!r} is not allowed; expected one of {sorted(VARIANTS)}.")


class AccuracyRecorder(StepTimer):
    """Times each step, then every `eval_every` steps (and before the first) records held-out greedy accuracy
    and the completion tokens generated so far; evaluation time is not part of the step time."""

    def __init__(self, policy: Policy, eval_every: int):
        super().__init__()
        self.policy, self.eval_every = policy, eval_every
        self.counter: GenerationCounter | None = None
        self.steps, self.accuracy, self.tokens = [], [], []

    def _evaluate(self, step: int, model) -> None:
        self.steps.append(step)
        self.accuracy.append(self.policy.held_out_accuracy(model))
        self.tokens.append(self.counter.tokens)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._evaluate(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        super().on_step_end(args, state, control, **kwargs)
        if state.global_step % self.eval_every == 0 or state.global_step == args.max_steps:
            self._evaluate(state.global_step, model)


def logged_series(log_history: list[dict], key: str) -> list[float]:
    return [entry[key] for entry in log_history if key in entry]


def run_variant(variant: str, policy: Policy, settings: TaskSettings, seed: int, cli) -> dict:
    shared = training_kwargs(settings, seed, cli.use_vllm)
    trainer_class, config = variant_trainer_and_config(variant, os.path.join(cli.scratch_dir, variant), shared)
    recorder = AccuracyRecorder(policy, cli.eval_every)
    trainer = build_trainer(trainer_class, config, policy, callbacks=[recorder])
    recorder.counter = GenerationCounter(trainer)
    started = time.perf_counter()
    trainer.train()
    history = trainer.state.log_history
    return {
        "variant": variant,
        "seed": seed,
        "eval_steps": recorder.steps,
        "accuracy": recorder.accuracy,
        "generated_tokens": recorder.tokens,
        "generated_completions": recorder.counter.completions,
        "step_seconds": recorder.durations,
        "run_seconds": time.perf_counter() - started,
        "mean_length": logged_series(history, "completions/mean_length"),
        "zero_std_fraction": logged_series(history, "frac_reward_zero_std"),
        "reward": logged_series(history, "reward"),
        "rounds": logged_series(history, "dynamic_sampling/rounds"),
        "generated_groups": logged_series(history, "dynamic_sampling/generated_groups"),
        "pass_rate": logged_series(history, "dynamic_sampling/pass_rate"),
        "filled": logged_series(history, "dynamic_sampling/filled"),
    }


# Summary: one row per variant, from the per-seed runs.

FINAL_EVALS = 3  # a seed's final accuracy is the mean of its last evaluations, which damps held-out noise
SMOOTHING_STEPS = 20  # rolling window for per-step curves in the plots


def _mean(values) -> float:
    return statistics.fmean(values) if values else math.nan


def _sd(values) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def first_step_reaching(run: dict, target: float) -> int | None:
    return next((step for step, acc in zip(run["eval_steps"], run["accuracy"]) if acc >= target), None)


def accuracy_at_tokens(run: dict, budget: float) -> float:
    """Held-out accuracy when the run had generated `budget` completion tokens (linear between evaluations)."""
    return float(numpy.interp(budget, run["generated_tokens"], run["accuracy"]))


def summarize(report: dict) -> tuple[list[dict], float]:
    """Per-variant statistics, and the common token budget (what the cheapest run generated in total)."""
    by_variant = {name: [run for run in report["runs"] if run["variant"] == name] for name in report["variants"]}
    budget = min(run["generated_tokens"][-1] for run in report["runs"])
    batch_groups = report["settings"]["batch_size"] // report["settings"]["num_generations"]
    rows = []
    for name, runs in by_variant.items():
        starts = [run["accuracy"][0] for run in runs]
        finals = [_mean(run["accuracy"][-FINAL_EVALS:]) for run in runs]
        reached = [step for step in (first_step_reaching(run, report["target_accuracy"]) for run in runs) if step is not None]
        steps = sum(len(run["step_seconds"]) for run in runs)
        rows.append(
            {
                "variant": name,
                "label": report["variants"][name],
                "start": _mean(starts),
                "final": _mean(finals),
                "final_sd": _sd(finals),
                "steps_to_target": _mean(reached),
                "seeds_reaching_target": len(reached),
                "seeds": len(runs),
                "accuracy_at_budget": _mean([accuracy_at_tokens(run, budget) for run in runs]),
                "accuracy_at_budget_sd": _sd([accuracy_at_tokens(run, budget) for run in runs]),
                "gain_per_100k_tokens": _mean(
                    [(final - start) / run["generated_tokens"][-1] * 1e5 for run, start, final in zip(runs, starts, finals)]
                ),
                "tokens_per_step": sum(run["generated_tokens"][-1] for run in runs) / steps,
                "mean_length": _mean([value for run in runs for value in run["mean_length"]]),
                "informative_share": 1 - _mean([value for run in runs for value in run["zero_std_fraction"]]),
                "median_step_seconds": statistics.median(value for run in runs for value in run["step_seconds"]),
                "rounds_per_step": _mean([value for run in runs for value in run["rounds"]]),
                "pass_rate": _mean([value for run in runs for value in run["pass_rate"]]),
                "groups_per_trained_group": (
                    sum(sum(run["generated_groups"]) for run in runs) / (steps * batch_groups)
                    if any(run["generated_groups"] for run in runs)
                    else math.nan
                ),
                "filled_steps": sum(sum(run["filled"]) for run in runs),
            }
        )
    return rows, budget


def _fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def tables_markdown(rows: list[dict], budget: float, report: dict) -> str:
    target = report["target_accuracy"]
    learning = markdown_table(
        [
            "variant",
            "accuracy at step 0",
            f"final accuracy (mean of last {FINAL_EVALS} evals; mean ± sd over seeds)",
            f"steps to accuracy >= {target:.2f} (seeds reaching it)",
            f"accuracy at {int(budget)} generated tokens",
            "accuracy gain per 100k generated tokens",
        ],
        [
            [
                row["label"],
                _fmt(row["start"]),
                f"{_fmt(row['final'])} ± {_fmt(row['final_sd'])}",
                f"{_fmt(row['steps_to_target'], 0)} ({row['seeds_reaching_target']}/{row['seeds']})",
                f"{_fmt(row['accuracy_at_budget'])} ± {_fmt(row['accuracy_at_budget_sd'])}",
                _fmt(row["gain_per_100k_tokens"]),
            ]
            for row in rows
        ],
    )
    cost = markdown_table(
        [
            "variant",
            "generated tokens per step",
            "mean completion length (trained batch)",
            "informative groups in trained batch",
            "median wall s/step",
            "generation rounds per step",
            "pass rate",
            "generated groups per trained group",
            "steps filled with degenerate groups",
        ],
        [
            [
                row["label"],
                _fmt(row["tokens_per_step"], 1),
                _fmt(row["mean_length"], 2),
                _fmt(row["informative_share"], 2),
                _fmt(row["median_step_seconds"], 4),
                _fmt(row["rounds_per_step"], 2),
                _fmt(row["pass_rate"], 2),
                _fmt(row["groups_per_trained_group"], 2),
                "n/a" if math.isnan(row["rounds_per_step"]) else str(int(row["filled_steps"])),
            ]
            for row in rows
        ],
    )
    return f"{learning}\n\n{cost}\n"


def _rolling(values: list[float], window: int) -> numpy.ndarray:
    values = numpy.asarray(values, dtype=float)
    window = max(1, min(window, len(values)))
    return numpy.convolve(values, numpy.ones(window) / window, mode="valid")


def _stack(runs: list[dict], key: str) -> numpy.ndarray:
    length = min(len(run[key]) for run in runs)
    return numpy.array([run[key][:length] for run in runs], dtype=float)


def write_plots(report: dict, output_dir: str) -> list[str]:
    by_variant = {name: [run for run in report["runs"] if run["variant"] == name] for name in report["variants"]}
    written = []

    def save(figure, name):
        figure.tight_layout()
        figure.savefig(os.path.join(output_dir, name), dpi=120)
        plt.close(figure)
        written.append(name)

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, runs in by_variant.items():
        accuracy = _stack(runs, "accuracy")
        steps = runs[0]["eval_steps"][: accuracy.shape[1]]
        axes.plot(steps, accuracy.mean(axis=0), label=report["variants"][name])
        axes.fill_between(steps, accuracy.min(axis=0), accuracy.max(axis=0), alpha=0.15)
    axes.axhline(report["target_accuracy"], color="grey", linestyle="--", linewidth=0.8, label="target")
    axes.set(xlabel="optimizer step", ylabel="held-out greedy accuracy",
             title=f"Held-out accuracy (mean; band = min..max over {len(report['seeds'])} seeds)")
    axes.legend()
    save(figure, "accuracy_vs_step.png")

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, runs in by_variant.items():
        accuracy, tokens = _stack(runs, "accuracy"), _stack(runs, "generated_tokens")
        axes.plot(tokens.mean(axis=0) / 1000, accuracy.mean(axis=0), label=report["variants"][name])
    axes.set(xlabel="generated completion tokens (thousands)", ylabel="held-out greedy accuracy",
             title="Accuracy per generated token (mean over seeds)")
    axes.legend()
    save(figure, "accuracy_vs_tokens.png")

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, runs in by_variant.items():
        lengths = _stack(runs, "mean_length").mean(axis=0)
        smoothed = _rolling(lengths, SMOOTHING_STEPS)
        axes.plot(numpy.arange(len(smoothed)) + len(lengths) - len(smoothed) + 1, smoothed, label=report["variants"][name])
    # The y-axis spans 0..max_completion_length so that a flat length reads as flat, not as amplified noise.
    axes.set(xlabel="optimizer step", ylabel="mean completion length (tokens)",
             ylim=(0, report["settings"]["max_completion_length"]),
             title=f"Completion length of the trained batch ({SMOOTHING_STEPS}-step rolling mean over seeds)")
    axes.legend()
    save(figure, "completion_length.png")

    sampled = [runs for runs in by_variant.values() if all(run["rounds"] for run in runs)]
    if sampled:
        figure, (rounds_axes, pass_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
        for runs in sampled:
            for key, axes in (("rounds", rounds_axes), ("pass_rate", pass_axes)):
                values = _stack(runs, key).mean(axis=0)
                axes.plot(numpy.arange(1, len(values) + 1), values, alpha=0.3, color="tab:green")
                smoothed = _rolling(values, SMOOTHING_STEPS)
                axes.plot(numpy.arange(len(smoothed)) + len(values) - len(smoothed) + 1, smoothed, color="tab:green")
        rounds_axes.set(xlabel="optimizer step", ylabel="generation rounds per step", ylim=(0.9, None), title="Rounds")
        pass_axes.set(xlabel="optimizer step", ylabel="informative / generated groups", ylim=(0, 1), title="Pass rate")
        figure.suptitle(f"Dynamic sampling (mean over seeds; dark line: {SMOOTHING_STEPS}-step rolling mean)")
        save(figure, "dynamic_sampling.png")
    return written


def write_report(report: dict, output_dir: str) -> str:
    rows, budget = summarize(report)
    tables = tables_markdown(rows, budget, report)
    plots = write_plots(report, output_dir)
    settings = ", ".join(f"{key}={value}" for key, value in report["settings"].items())
    lines = [
        "# Variants on the toy task",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {machine_markdown(report['machine'])}. Total wall time {report['total_seconds']:.0f} s.",
        "",
        f"Settings (shared by every variant): {settings}; seeds {report['seeds']}; held-out accuracy every "
        f"{report['eval_every']} steps" + (f"; model {report['model_path']}" if report["model_path"] else "")
        + ("; vLLM colocate" if report["use_vllm"] else "") + ".",
        "",
        tables,
        *[f"![{name}]({name})" for name in plots],
        "",
    ]
    with open(os.path.join(output_dir, "variants.md"), "w") as handle:
        handle.write("\n".join(lines))
    return tables


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, TaskSettings())
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {DEFAULT_SEEDS}")
    parser.add_argument("--eval_every", type=int, default=None, help=f"default {DEFAULT_EVAL_EVERY}")
    parser.add_argument("--target_accuracy", type=float, default=DEFAULT_TARGET_ACCURACY)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument(
        "--replot", action="store_true", help="Rewrite the table and plots from --output_dir/variants.json; no training."
    )
    cli = parser.parse_args(argv)
    cli.seeds = cli.seeds or ([0] if cli.smoke else DEFAULT_SEEDS)
    cli.eval_every = cli.eval_every or (1 if cli.smoke else DEFAULT_EVAL_EVERY)
    if cli.eval_every < 1:
        parser.error(f"--eval_every must be >= 1, got {cli.eval_every}")
    if not 0.0 < cli.target_accuracy <= 1.0:
        parser.error(f"--target_accuracy must be in (0, 1], got {cli.target_accuracy}")
    return cli


def main(argv=None) -> int:
    cli = parse_args(argv)
    if cli.replot:
        with open(os.path.join(cli.output_dir, "variants.json")) as handle:
            print(write_report(json.load(handle), cli.output_dir))
        return 0
    settings = resolve_settings(cli, TaskSettings())
    configure_runtime(cli.num_threads)
    os.makedirs(cli.output_dir, exist_ok=True)
    scratch = tempfile.TemporaryDirectory(prefix="compare_variants_")
    cli.scratch_dir = scratch.name
    runs = []
    started, load_at_start = time.perf_counter(), load_average()
    for seed in cli.seeds:
        policy = load_policy(seed, settings, cli.model_path)
        for variant in cli.variants:
            run = run_variant(variant, policy, settings, seed, cli)
            runs.append(run)
            print(
                f"seed {seed} {variant:>22}: accuracy {run['accuracy'][0]:.3f} -> {run['accuracy'][-1]:.3f}, "
                f"{run['generated_tokens'][-1]} generated tokens, {run['run_seconds']:.1f} s",
                flush=True,
            )
    report = {
        "command": " ".join(["python", "benchmarks/compare_variants.py", *(sys.argv[1:] if argv is None else argv)]),
        "settings": vars(settings),
        "seeds": cli.seeds,
        "eval_every": cli.eval_every,
        "target_accuracy": cli.target_accuracy,
        "model_path": cli.model_path,
        "use_vllm": cli.use_vllm,
        "machine": machine_description(cli.num_threads, load_at_start),
        "total_seconds": time.perf_counter() - started,
        "variants": {name: VARIANTS[name] for name in cli.variants},
        "runs": runs,
    }
    write_json(report, os.path.join(cli.output_dir, "variants.json"))
    print(write_report(report, cli.output_dir))
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
