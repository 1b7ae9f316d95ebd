"""Tables, statements and plots of the variant comparison, written from `variants.json` (see `variants_summary`)."""

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy  # noqa: E402

from benchmarks.shared.output import machine_markdown, markdown_table  # noqa: E402
from benchmarks.shared.stats import t_interval  # noqa: E402
from benchmarks.variants.variants_summary import FINAL_EVALS, binned, effect_statements, summarize  # noqa: E402

CURVE_BINS = 10  # training-curve plots average each run's per-step values over tenths of the steps


def _fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def tables_markdown(summaries: dict, budget: float, report: dict) -> str:
    labels, target = report["variants"], report["target_accuracy"]
    levels = sorted(report["level_counts"], key=int)
    learning = markdown_table(
        ["arm", "accuracy at step 0", f"final accuracy (last {FINAL_EVALS} evals)",
         *[f"final, level {level} ({report['level_counts'][level]} problems)" for level in levels]],
        [[labels[name], s["start"].text(), s["final"].text(), *[s["final_by_level"][level].text() for level in levels]]
         for name, s in summaries.items()],
    )
    cost = markdown_table(
        ["arm", f"seeds reaching {target:.2f}", "steps to target (seeds reaching it)",
         "generated tokens to target (seeds reaching it)", f"accuracy at {int(budget)} generated tokens",
         "generated completion tokens per step"],
        [[labels[name], f"{s['reached']}/{s['seeds']}", s["steps_to_target"].text(0), s["tokens_to_target"].text(0),
          s["accuracy_at_budget"].text(), s["tokens_per_step"].text(1)] for name, s in summaries.items()],
    )
    dynamics = markdown_table(
        ["arm", "mean length, right", "mean length, wrong", "all-right groups", "all-wrong groups", "generated groups",
         "entropy (mean over steps)", "low clip fraction", "high clip fraction", "median s/step", "s per run"],
        [[labels[name], _fmt(s["correct_length"], 2), _fmt(s["wrong_length"], 2), _fmt(s["all_correct_share"]),
          _fmt(s["all_wrong_share"]), str(s["generated_groups"]), s["entropy"].text(), s["clip_low"].text(4),
          s["clip_high"].text(4), _fmt(s["median_step_seconds"]), s["run_seconds"].text(1)]
         for name, s in summaries.items()],
    )
    return (f"Accuracy (held-out, greedy; mean over seeds [95% t-interval]):\n\n{learning}\n\n"
            f"Cost to a target fixed in advance (accuracy >= {target:.2f}; intervals over the seeds that reach it):\n\n"
            f"{cost}\n\nTraining dynamics (lengths and group shares pooled over every generated completion and group of "
            f"all seeds):\n\n{dynamics}\n")


def _band(axes, x, matrix: numpy.ndarray, label: str) -> None:
    """Mean over seeds and its 95% t-interval, per column of `matrix` (seeds x points)."""
    intervals = [t_interval(column) for column in matrix.T]
    mean = numpy.array([i.mean for i in intervals])
    axes.plot(x, mean, label=label)
    if len(matrix) > 1:
        axes.fill_between(x, [i.low for i in intervals], [i.high for i in intervals], alpha=0.15)


def _stack(runs: list[dict], key: str) -> numpy.ndarray:
    length = min(len(run[key]) for run in runs)
    return numpy.array([run[key][:length] for run in runs], dtype=float)


def write_plots(report: dict, summaries: dict, output_dir: str) -> list[str]:
    labels = report["variants"]
    by_variant = {name: [run for run in report["runs"] if run["variant"] == name] for name in labels}
    seeds_note = f"mean over {len(report['seeds'])} seeds; band: 95% t-interval"
    bin_steps = (numpy.arange(CURVE_BINS) + 0.5) * report["settings"]["max_steps"] / CURVE_BINS
    written = []

    def save(figure, name):
        figure.tight_layout()
        figure.savefig(os.path.join(output_dir, name), dpi=110)
        plt.close(figure)
        written.append(name)

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, runs in by_variant.items():
        accuracy = _stack(runs, "accuracy")
        _band(axes, runs[0]["eval_steps"][: accuracy.shape[1]], accuracy, labels[name])
    axes.axhline(report["target_accuracy"], color="grey", linestyle="--", linewidth=0.8, label="target")
    axes.set(xlabel="optimizer step", ylabel="held-out greedy accuracy", title=f"Held-out accuracy ({seeds_note})")
    axes.legend(fontsize=8)
    save(figure, "accuracy_vs_step.png")

    figure, axes = plt.subplots(figsize=(8, 5))
    for name, runs in by_variant.items():
        accuracy, tokens = _stack(runs, "accuracy"), _stack(runs, "eval_tokens")
        axes.plot(tokens.mean(axis=0) / 1000, accuracy.mean(axis=0), marker=".", label=labels[name])
    axes.axhline(report["target_accuracy"], color="grey", linestyle="--", linewidth=0.8, label="target")
    axes.set(xlabel="generated completion tokens, all rounds (thousands)", ylabel="held-out greedy accuracy",
             title="Accuracy per generated token (mean over seeds)")
    axes.legend(fontsize=8)
    save(figure, "accuracy_vs_tokens.png")

    levels = sorted(report["level_counts"], key=int)
    figure, axes = plt.subplots(figsize=(8, 5))
    width = 0.8 / len(summaries)
    for index, (name, summary) in enumerate(summaries.items()):
        intervals = [summary["final_by_level"][level] for level in levels]
        errors = [[i.mean - i.low if not math.isnan(i.low) else 0 for i in intervals],
                  [i.high - i.mean if not math.isnan(i.high) else 0 for i in intervals]]
        axes.bar(numpy.arange(len(levels)) + index * width, [i.mean for i in intervals], width, yerr=errors,
                 capsize=2, label=labels[name])
    axes.set_xticks(numpy.arange(len(levels)) + 0.4 - width / 2, [f"level {level}" for level in levels])
    axes.set(ylabel="final held-out accuracy", ylim=(0, 1), title=f"Final accuracy per level ({seeds_note})")
    axes.legend(fontsize=8)
    save(figure, "accuracy_by_level.png")

    panels = [
        ("lengths.png", [("correct_length", "right completions"), ("wrong_length", "wrong completions")],
         "mean completion length (tokens)", (0, report["settings"]["max_completion_length"])),
        ("entropy.png", [("entropy", "policy entropy")], "entropy (nats per token)", (0, None)),
        ("clip_fractions.png", [("clip_low", "low clip fraction"), ("clip_high", "high clip fraction")],
         "fraction of tokens clipped", (0, None)),
        ("degenerate_groups.png", [("all_correct_share", "all-right groups"), ("all_wrong_share", "all-wrong groups"),
                                   ("degenerate_share", "degenerate groups (both)")], "share of generated groups", (0, 1)),
    ]
    # Fixed y ranges (lengths up to the limit, shares 0..1), so a flat curve reads as flat, not as amplified noise.
    for filename, series, ylabel, ylim in panels:
        figure, axes_row = plt.subplots(1, len(series), figsize=(5.5 * len(series), 4.5), squeeze=False)
        for axes, (key, title) in zip(axes_row[0], series, strict=True):
            for name, runs in by_variant.items():
                if all(run.get(key, True) for run in runs):  # a logged metric an arm does not log is left out
                    _band(axes, bin_steps, numpy.array([binned(run, key, CURVE_BINS) for run in runs]), labels[name])
            axes.set(xlabel="optimizer step", ylabel=ylabel, title=title, ylim=ylim)
        axes_row[0][0].legend(fontsize=7)
        figure.suptitle(f"Per tenth of training ({seeds_note})", fontsize=10)
        save(figure, filename)
    return written


def write_report(report: dict, output_dir: str) -> str:
    summaries, differences, budget = summarize(report)
    tables = tables_markdown(summaries, budget, report)
    statements = "\n".join(effect_statements(summaries, differences, report["variants"]))
    plots = write_plots(report, summaries, output_dir)
    settings = ", ".join(f"{key}={value}" for key, value in report["settings"].items())
    lines = [
        f"# Variants on the {report['task']} task",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {machine_markdown(report['machine'])}. Total wall time {report['total_seconds']:.0f} s with "
        f"{report['workers']} worker process(es).",
        "",
        f"Settings (shared by every arm): {settings}; seeds {report['seeds']}; held-out accuracy every "
        f"{report['eval_every']} steps on {sum(report['level_counts'].values())} problems"
        + ("; vLLM colocate" if report["use_vllm"] else "") + ".",
        "",
        tables,
        "Effects over training, read off the intervals:",
        "",
        statements,
        "",
        *[f"![{name}]({name})" for name in plots],
        "",
    ]
    with open(os.path.join(output_dir, "variants.md"), "w") as handle:
        handle.write("\n".join(lines))
    return f"{tables}\n{statements}\n"
