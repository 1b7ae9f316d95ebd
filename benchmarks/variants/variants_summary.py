"""Numbers of the variant comparison, from the per-seed runs in `variants.json`: one summary per arm, and the
effects (change over training) with 95% t-intervals over seeds, paired against naive GRPO by seed."""

import math

import numpy

from benchmarks.shared.stats import Interval, binned_means, first_reaching, t_interval

BASELINE = "grpo"
FINAL_EVALS = 2  # a seed's final accuracy is the mean of its last evaluations, which damps held-out noise
EFFECT_BINS = 5  # an effect is the change from the first to the last fifth of the optimizer steps

# Each effect: run series -> per-step values; the direction in which it is the reported effect; its description.
EFFECTS = {
    "degenerate_share": (+1, "share of degenerate groups (all right or all wrong) among all generated groups"),
    "wrong_length": (+1, "mean length of wrong completions (tokens)"),
    "entropy": (-1, "policy entropy of the trained completions (TRL's `entropy`)"),
}
EFFECT_NAMES = {"degenerate_share": "degenerate-group share rising", "wrong_length": "wrong-answer length growth",
                "entropy": "entropy collapse"}


def ratio_series(numerators, denominators) -> list[float]:
    return [n / d if d else math.nan for n, d in zip(numerators, denominators, strict=True)]


def per_step(run: dict, name: str) -> list[float]:
    """Per-optimizer-step series of one run, for the effects and the training-curve plots."""
    if name == "degenerate_share":
        return ratio_series([a + b for a, b in zip(run["all_correct"], run["all_wrong"], strict=True)], run["groups"])
    if name == "all_correct_share":
        return ratio_series(run["all_correct"], run["groups"])
    if name == "all_wrong_share":
        return ratio_series(run["all_wrong"], run["groups"])
    if name == "wrong_length":
        return ratio_series(run["wrong_tokens"], run["wrong"])
    if name == "correct_length":
        return ratio_series(run["correct_tokens"], run["correct"])
    return [float(value) for value in run[name]]  # logged TRL metrics: entropy, clip_low, clip_high


def binned(run: dict, name: str, bins: int) -> list[float]:
    values = per_step(run, name)
    return binned_means(range(len(values)), values, len(values), bins)


def change_over_training(run: dict, name: str) -> float:
    """Mean over the last fifth of the steps minus mean over the first fifth."""
    bins = binned(run, name, EFFECT_BINS)
    return bins[-1] - bins[0]


def final_accuracy(values: list[float]) -> float:
    return float(numpy.mean(values[-FINAL_EVALS:]))


def accuracy_at_tokens(run: dict, budget: float) -> float:
    """Held-out accuracy when the run had generated `budget` completion tokens (linear between evaluations)."""
    return float(numpy.interp(budget, run["eval_tokens"], run["accuracy"]))


def _sum(runs, key) -> int:
    return sum(sum(run[key]) for run in runs)


def summarize_arm(runs: list[dict], target: float, budget: float) -> dict:
    steps_to = [first_reaching(run["eval_steps"], run["accuracy"], target) for run in runs]
    tokens_to = [first_reaching(run["eval_tokens"], run["accuracy"], target) for run in runs]
    levels = sorted(runs[0]["accuracy_by_level"], key=int)
    groups = _sum(runs, "groups")
    return {
        "seeds": len(runs),
        "start": t_interval(run["accuracy"][0] for run in runs),
        "final": t_interval(final_accuracy(run["accuracy"]) for run in runs),
        "final_by_level": {level: t_interval(final_accuracy(run["accuracy_by_level"][level]) for run in runs)
                           for level in levels},
        "steps_to_target": t_interval(step for step in steps_to if step is not None),
        "tokens_to_target": t_interval(tokens for tokens in tokens_to if tokens is not None),
        "reached": sum(step is not None for step in steps_to),
        "accuracy_at_budget": t_interval(accuracy_at_tokens(run, budget) for run in runs),
        "tokens_per_step": t_interval(sum(run["tokens"]) / len(run["tokens"]) for run in runs),
        "correct_length": _sum(runs, "correct_tokens") / max(_sum(runs, "correct"), 1),
        "wrong_length": _sum(runs, "wrong_tokens") / max(_sum(runs, "wrong"), 1),
        "all_correct_share": _sum(runs, "all_correct") / groups if groups else math.nan,
        "all_wrong_share": _sum(runs, "all_wrong") / groups if groups else math.nan,
        "entropy": t_interval(numpy.mean(run["entropy"]) if run["entropy"] else math.nan for run in runs),
        "clip_low": t_interval(numpy.mean(run["clip_low"]) if run["clip_low"] else math.nan for run in runs),
        "clip_high": t_interval(numpy.mean(run["clip_high"]) if run["clip_high"] else math.nan for run in runs),
        "generated_groups": groups,
        "median_step_seconds": float(numpy.median([value for run in runs for value in run["step_seconds"]])),
        "run_seconds": t_interval(run["run_seconds"] for run in runs),
        "effects": {name: t_interval(change_over_training(run, name) for run in runs) for name in EFFECTS},
    }


def paired_effect_differences(by_variant: dict[str, list[dict]]) -> dict[str, dict[str, Interval]]:
    """Per arm and effect: the change over training minus naive GRPO's on the same seed (same warm start)."""
    if BASELINE not in by_variant:
        return {}
    baseline = {run["seed"]: run for run in by_variant[BASELINE]}
    differences = {}
    for variant, runs in by_variant.items():
        if variant == BASELINE:
            continue
        paired = [(run, baseline[run["seed"]]) for run in runs if run["seed"] in baseline]
        differences[variant] = {
            name: t_interval(change_over_training(run, name) - change_over_training(base, name) for run, base in paired)
            for name in EFFECTS
        }
    return differences


def summarize(report: dict) -> tuple[dict[str, dict], dict, float]:
    """Per-arm summaries, paired differences against naive GRPO, and the common token budget (the fewest
    completion tokens any run generated in total, so every arm is compared at a budget it reached)."""
    by_variant = {name: [run for run in report["runs"] if run["variant"] == name] for name in report["variants"]}
    budget = min(run["eval_tokens"][-1] for run in report["runs"])
    summaries = {name: summarize_arm(runs, report["target_accuracy"], budget) for name, runs in by_variant.items()}
    return summaries, paired_effect_differences(by_variant), budget


def effect_statements(summaries: dict, differences: dict, labels: dict[str, str]) -> list[str]:
    """One generated sentence per effect and arm, read off the intervals; no conclusion is written by hand."""
    lines = []
    for name, (direction, description) in EFFECTS.items():
        lines.append(f"- **{EFFECT_NAMES[name]}** ({description}; last fifth of training minus first fifth, "
                     "mean over seeds [95% t-interval]):")
        for variant, summary in summaries.items():
            change = summary["effects"][name]
            if variant == BASELINE:
                verdict = _verdict(change, direction, "appears", "does not appear")
                lines.append(f"  - {labels[variant]}: change {change.text()}: {verdict}.")
                continue
            difference = differences.get(variant, {}).get(name)
            compared = (
                f"; difference from naive GRPO on the same seeds {difference.text()}: "
                + _difference_verdict(difference)
                if difference is not None else ""
            )
            lines.append(f"  - {labels[variant]}: change {change.text()}{compared}.")
    return lines


def _verdict(change: Interval, direction: int, present: str, absent: str) -> str:
    if math.isnan(change.low):
        return "undetermined (fewer than 2 seeds)"
    if change.excludes_zero():
        return present + " (interval excludes 0)" if change.mean * direction > 0 else f"{absent}: it goes the other way"
    return absent + " (interval includes 0)"


def _difference_verdict(difference: Interval) -> str:
    if math.isnan(difference.low):
        return "undetermined (fewer than 2 paired seeds)"
    return "changes it (interval excludes 0)" if difference.excludes_zero() else "no change detected (interval includes 0)"
