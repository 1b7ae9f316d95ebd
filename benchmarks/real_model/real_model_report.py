"""Merges the real-model benchmark's per-run result files into its report: tables at equal steps, equal generated
tokens and equal training time, paired differences against DAPO, the degenerate share over training, generated
completions per informative trained row, a plot, and the decision the method file's rule takes.

Pure arithmetic on the result files: no torch, no trainers. The rule and the measures are those of
docs/results/real_model_method.md.
"""

import glob
import json
import math
import os
import statistics

import numpy

from benchmarks.real_model.arms import ARMS, RESULTS_DIR
from benchmarks.shared.output import markdown_table
from benchmarks.shared.settings import REPO_ROOT
from benchmarks.shared.stats import t_interval

BASELINE, CANDIDATE, REFERENCE = "dapo", "dapo_skip_carry", "grpo"
SEEDS_FOR_DECISION = 3
DYNAMIC_SAMPLING_ARMS = ("dapo", "dapo_skip_carry")


def load_runs(results_dir: str) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*-seed*.json"))):
        with open(path, encoding="utf-8") as handle:
            runs.append(json.load(handle))
    if not runs:
        raise FileNotFoundError(f"no result files (ARM-seedS.json) in {results_dir}")
    return runs


def horizon(runs: list[dict]) -> int:
    """The largest evaluation step every run reached: runs cut by a deadline are compared where all have data."""
    return min(run["eval_steps"][-1] for run in runs)


def upto(run: dict, step: int) -> int:
    """Number of evaluations at steps <= `step`."""
    return sum(evaluated <= step for evaluated in run["eval_steps"])


def accuracy_at(run: dict, axis: str, value: float, last_step: int) -> float:
    """Held-out pass rate at `value` of `axis` ("eval_tokens" or "train_cpu_seconds"), linear between
    evaluations."""
    count = upto(run, last_step)
    return float(numpy.interp(value, run[axis][:count], run["accuracy"][:count]))


def step_counts(run: dict, field: str, last_step: int) -> int:
    """Sum of an `OutcomeProbe` field over the generation of optimizer steps 1..last_step (probe keys 0..last-1)."""
    return sum(counts[field] for step, counts in run["probe"].items() if int(step) < last_step)


def degenerate_share(run: dict, last_step: int, field: str = "equal_score_groups") -> float:
    groups = step_counts(run, "groups", last_step)
    if field == "all_right_or_wrong":
        return (step_counts(run, "all_correct", last_step) + step_counts(run, "all_wrong", last_step)) / groups
    return step_counts(run, field, last_step) / groups


def informative_trained_rows(run: dict, last_step: int) -> float:
    """Rows with a nonzero advantage among those trained in steps 1..last_step: dynamic sampling's kept groups
    (carried ones included, filled degenerate ones not); under `GRPOTrainer` every generated group is trained, and
    those whose rewards differ are informative."""
    group_size = run["settings"]["num_generations"]
    if run["arm"] in DYNAMIC_SAMPLING_ARMS:
        kept = run["logged"]["dynamic_sampling/kept_groups"]
        return group_size * sum(value for step, value in kept.items() if int(step) <= last_step)
    return group_size * (step_counts(run, "groups", last_step) - step_counts(run, "equal_score_groups", last_step))


def completions_per_informative_row(run: dict, last_step: int) -> float:
    rows = informative_trained_rows(run, last_step)
    return step_counts(run, "completions", last_step) / rows if rows else math.nan


def final_accuracy(run: dict, last_step: int) -> float:
    """Mean of the last two evaluations up to `last_step`: one evaluation alone is noisier."""
    return statistics.fmean(run["accuracy"][: upto(run, last_step)][-2:])


def mean_accuracy(run: dict, last_step: int) -> float:
    """Mean over the evaluations after step 0 up to `last_step`: the area under accuracy per step."""
    return statistics.fmean(run["accuracy"][1 : upto(run, last_step)])


def share_by_stretch(run: dict, last_step: int, stretch: int) -> list[float]:
    """Equal-score share of generated groups in each stretch of `stretch` optimizer steps up to `last_step`."""
    shares = []
    for start in range(0, last_step, stretch):
        steps = [counts for step, counts in run["probe"].items() if start <= int(step) < start + stretch]
        groups = sum(counts["groups"] for counts in steps)
        shares.append(sum(counts["equal_score_groups"] for counts in steps) / groups if groups else math.nan)
    return shares


def decision(runs_by_arm: dict, last_step: int, tokens: float) -> tuple[bool, list[str]]:
    """The method file's rule. Returns (turn skipping and carrying on, the reasons line by line)."""
    reasons = []
    reference = runs_by_arm.get(REFERENCE, [])
    final = [run["accuracy"][upto(run, last_step) - 1] for run in reference]
    gains = [run["accuracy"][upto(run, last_step) - 1] - run["accuracy"][0] for run in reference]
    spread = statistics.stdev(final) if len(final) > 1 else math.nan
    valid = len(gains) > 1 and statistics.fmean(gains) > 2 * spread
    if not gains:
        return False, [f"No decision yet: no {REFERENCE} run."]
    reasons.append(f"Validity: GRPO's held-out gain by step {last_step} is {statistics.fmean(gains):.3f} against a "
                   f"seed-to-seed spread (SD) of {spread:.3f} at that step: "
                   f"{'more' if valid else 'not more'} than twice the spread.")
    seeds = {arm: len(runs_by_arm.get(arm, [])) for arm in (REFERENCE, BASELINE, CANDIDATE)}
    if min(seeds.values()) < SEEDS_FOR_DECISION:
        return False, [*reasons, f"No decision yet: the rule needs {SEEDS_FOR_DECISION} seeds of {', '.join(seeds)}; "
                       f"the results hold {', '.join(f'{count} of {arm}' for arm, count in seeds.items())}."]
    paired = paired_runs(runs_by_arm, CANDIDATE, last_step)
    at_tokens = t_interval(accuracy_at(run, "eval_tokens", tokens, last_step)
                           - accuracy_at(base, "eval_tokens", tokens, last_step) for run, base in paired)
    reaches = at_tokens.mean >= 0
    reasons.append(f"(a) at {tokens:.0f} generated tokens, {CANDIDATE} - {BASELINE} = {at_tokens.text(3)}: "
                   f"{'reaches' if reaches else 'does not reach'} DAPO's accuracy (mean >= 0).")
    below = [label for label, interval in per_step_differences(paired, last_step) if interval.high < 0]
    reasons.append("(b) per step: " + (f"intervals entirely below zero at {', '.join(below)}." if below else
                                       "no interval lies entirely below zero."))
    turn_on = valid and reaches and not below
    reasons.append(f"Decision: skipping and carrying {'become' if turn_on else 'stay off as'} the defaults"
                   f"{'.' if turn_on else ' (DAPO as published).'}")
    return turn_on, reasons


def paired_runs(runs_by_arm: dict, arm: str, last_step: int) -> list[tuple[dict, dict]]:
    baseline = {run["seed"]: run for run in runs_by_arm[BASELINE]}
    return [(run, baseline[run["seed"]]) for run in runs_by_arm[arm] if run["seed"] in baseline]


def per_step_differences(paired: list[tuple[dict, dict]], last_step: int) -> list[tuple[str, object]]:
    steps = [step for step in paired[0][1]["eval_steps"] if 0 < step <= last_step]
    cells = [(f"step {step}", t_interval(run["accuracy"][run["eval_steps"].index(step)]
                                         - base["accuracy"][base["eval_steps"].index(step)] for run, base in paired))
             for step in steps]
    cells.append(("mean over evaluations", t_interval(mean_accuracy(run, last_step) - mean_accuracy(base, last_step)
                                                      for run, base in paired)))
    cells.append(("final", t_interval(final_accuracy(run, last_step) - final_accuracy(base, last_step)
                                      for run, base in paired)))
    return cells


def report(results_dir: str, output: str | None) -> str:
    runs = load_runs(results_dir)
    arms = [arm for arm in ARMS if any(run["arm"] == arm for run in runs)]
    by_arm = {arm: sorted((run for run in runs if run["arm"] == arm), key=lambda run: run["seed"]) for arm in arms}
    last = horizon(runs)
    tokens = min(run["eval_tokens"][upto(run, last) - 1] for run in runs)
    seconds = min(run["train_cpu_seconds"][upto(run, last) - 1] for run in runs)
    header = ["arm", "seeds", "step 0", f"step {last}", "mean over evaluations", f"at {tokens:.0f} tokens",
              f"at {seconds:.0f} CPU s", f"tokens to step {last}", f"CPU seconds to step {last}",
              "equal-score share of generated groups", "all right or all wrong",
              "generated completions / informative trained row"]
    rows = []
    for arm, arm_runs in by_arm.items():
        rows.append([ARMS[arm], str(len(arm_runs)),
                     t_interval(run["accuracy"][0] for run in arm_runs).text(3),
                     t_interval(run["accuracy"][upto(run, last) - 1] for run in arm_runs).text(3),
                     t_interval(mean_accuracy(run, last) for run in arm_runs).text(3),
                     t_interval(accuracy_at(run, "eval_tokens", tokens, last) for run in arm_runs).text(3),
                     t_interval(accuracy_at(run, "train_cpu_seconds", seconds, last) for run in arm_runs).text(3),
                     t_interval(run["eval_tokens"][upto(run, last) - 1] for run in arm_runs).text(0),
                     t_interval(run["train_cpu_seconds"][upto(run, last) - 1] for run in arm_runs).text(0),
                     t_interval(degenerate_share(run, last) for run in arm_runs).text(3),
                     t_interval(degenerate_share(run, last, "all_right_or_wrong") for run in arm_runs).text(3),
                     t_interval(completions_per_informative_row(run, last) for run in arm_runs).text(2)])  # fmt: skip
    covered = ", ".join(f"{arm} ({len(arm_runs)} seed{'s' if len(arm_runs) > 1 else ''})"
                        for arm, arm_runs in by_arm.items())
    sections = [f"Runs: {covered}. Horizon: step {last}, the last evaluation every run reached. Equal-budget points: {tokens:.0f} "
                f"generated completion tokens and {seconds:.0f} CPU seconds of training, the least any run reached by then.",
                "### Held-out pass rate per arm (mean over seeds [95% t-interval])\n\n" + markdown_table(header, rows)]
    steps = [step for step in by_arm[arms[0]][0]["eval_steps"] if step <= last]
    sections.append("### Held-out pass rate per optimizer step\n\n" + markdown_table(
        ["arm", *(f"step {step}" for step in steps)],
        [[ARMS[arm]] + [t_interval(run["accuracy"][i] for run in arm_runs).text(3) for i in range(len(steps))]
         for arm, arm_runs in by_arm.items()]))
    stretch = by_arm[arms[0]][0]["settings"]["eval_every"]
    sections.append("### Equal-score share of generated groups per stretch of steps\n\n" + markdown_table(
        ["arm", *(f"steps {start + 1}-{min(start + stretch, last)}" for start in range(0, last, stretch))],
        [[ARMS[arm]] + [t_interval(values).text(2) for values in zip(*(share_by_stretch(run, last, stretch)
                                                                       for run in arm_runs), strict=True)]
         for arm, arm_runs in by_arm.items()]))
    if BASELINE in by_arm:
        diff_rows = []
        for arm in arms:
            if arm == BASELINE:
                continue
            paired = paired_runs(by_arm, arm, last)
            cells = per_step_differences(paired, last)
            cells.append((f"at {tokens:.0f} tokens", t_interval(
                accuracy_at(run, "eval_tokens", tokens, last) - accuracy_at(base, "eval_tokens", tokens, last)
                for run, base in paired)))
            cells.append((f"at {seconds:.0f} CPU s", t_interval(
                accuracy_at(run, "train_cpu_seconds", seconds, last) - accuracy_at(base, "train_cpu_seconds", seconds, last)
                for run, base in paired)))
            diff_header = ["arm", *(label for label, _ in cells)]
            diff_rows.append([ARMS[arm], *(interval.text(3) for _, interval in cells)])
        sections.append(f"### Paired difference against {ARMS[BASELINE]} (same seed)\n\n"
                        + markdown_table(diff_header, diff_rows))
    _, reasons = decision(by_arm, last, tokens)
    sections.append("### Decision (the method file's rule)\n\n" + "\n".join(f"- {reason}" for reason in reasons))
    machines = sorted({f"{run['device']}; {run['machine']}" for run in runs})
    sections.append("Measured on: " + " / ".join(machines) + ". " + provenance(results_dir, output))
    text = "\n\n".join(sections)
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        plot(by_arm, last, os.path.splitext(output)[0] + ".png")
    return text


def provenance(results_dir: str, output: str | None) -> str:
    """The commands that wrote the result files and this report, with paths relative to the repository."""
    def shown(path: str) -> str:
        relative = os.path.relpath(os.path.abspath(path), REPO_ROOT)
        return path if relative.startswith("..") else relative

    module = "python -m benchmarks.real_model.real_model_benchmark"
    options = ("" if os.path.abspath(results_dir) == RESULTS_DIR else f" --results_dir {shown(results_dir)}") + (
        f" --output {shown(output)}" if output else "")
    return (f"Written by `{module} report{options}` from the result files that `{module} grid` (or `run`) wrote in "
            f"`{shown(results_dir)}`.")


def plot(by_arm: dict, last: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels = [("eval_steps", "optimizer step"), ("eval_tokens", "generated completion tokens"),
              ("train_cpu_seconds", "training CPU seconds")]
    for arm, arm_runs in by_arm.items():
        for (axis, label), panel in zip(panels, axes.flat, strict=False):
            count = min(upto(run, last) for run in arm_runs)
            xs = numpy.mean([run[axis][:count] for run in arm_runs], axis=0)
            ys = numpy.mean([run["accuracy"][:count] for run in arm_runs], axis=0)
            panel.plot(xs, ys, marker="o", label=ARMS[arm])
            panel.set_xlabel(f"{label} (mean over seeds)")
            panel.set_ylabel("held-out pass rate")
        stretch = arm_runs[0]["settings"]["eval_every"]
        shares = numpy.nanmean([share_by_stretch(run, last, stretch) for run in arm_runs], axis=0)
        axes[1, 1].plot([start + stretch for start in range(0, last, stretch)], shares, marker="o", label=ARMS[arm])
    axes[1, 1].set_xlabel("optimizer step")
    axes[1, 1].set_ylabel("equal-score share of generated groups")
    axes[0, 0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
