"""The study's comparisons as pure functions of the result files' records: (a) non-inferiority of the defaults
against DAPO as published, (b) DAPO as published against `GRPOTrainer` at equal steps and equal generated tokens,
(c) generation per informative trained row, the validity check, and how much skipping acted. Each is exactly as
docs/results/real_model_study_method.md fixes it; no model, no torch beyond the t-quantile.

A record is one (arm, seed) result file as `study.run` writes it; `runs` maps arm -> seed -> record.
"""

import math
import statistics

from benchmarks.shared.stats import Interval, t_interval

MARGIN = 0.035
VALIDITY_GAIN = 2 * MARGIN
STRETCH = 5  # steps per stretch in the skipping and equal-score tables
ARMS_OF_A = ("defaults", "dapo")
ARMS_OF_B = ("dapo", "grpo")


def complete_seeds(runs: dict, arms) -> list[int]:
    """Seeds whose runs of every one of `arms` are complete."""
    seed_sets = [{seed for seed, record in runs.get(arm, {}).items() if record["complete"]} for arm in arms]
    return sorted(set.intersection(*seed_sets)) if seed_sets else []


def accuracy_at(record: dict, step: int) -> float:
    if step not in record["eval_steps"]:
        raise ValueError(f"accuracy_at: the run {record['arm']}-seed{record['seed']} has no evaluation at step {step} "
                         f"(it has {record['eval_steps']}).")
    return record["accuracy"][record["eval_steps"].index(step)]


def later_steps(record: dict) -> list[int]:
    """The evaluation steps after step 0 (5, 10, 15, 20 in the method)."""
    return [step for step in record["eval_steps"] if step > 0]


def mean_after_start(record: dict) -> float:
    """The mean held-out pass rate over the evaluations after step 0."""
    return statistics.fmean(accuracy_at(record, step) for step in later_steps(record))


def paired_differences(runs: dict, arm: str, other: str, summary) -> list[float]:
    """Per seed, `summary(record of arm) - summary(record of other)`, complete pairs only."""
    return [summary(runs[arm][seed]) - summary(runs[other][seed]) for seed in complete_seeds(runs, (arm, other))]


def paired(runs: dict, arm: str, other: str, summary) -> Interval:
    """The t-interval over seeds of `paired_differences`."""
    return t_interval(paired_differences(runs, arm, other, summary))


def per_step_differences(runs: dict, arm: str, other: str) -> dict[int, Interval]:
    seeds = complete_seeds(runs, (arm, other))
    if not seeds:
        return {}
    steps = later_steps(runs[arm][seeds[0]])
    return {step: paired(runs, arm, other, lambda record, step=step: accuracy_at(record, step)) for step in steps}


def non_inferiority(runs: dict, margin: float = MARGIN) -> tuple[Interval, bool]:
    """(a): the interval of the per-seed mean over evaluations after step 0 of defaults - dapo, and whether its
    lower end is above -margin."""
    interval = paired(runs, *ARMS_OF_A, mean_after_start)
    return interval, not math.isnan(interval.low) and interval.low > -margin


def gain(record: dict) -> float:
    """Mean over the evaluations after step 0, less the step-0 pass rate."""
    return mean_after_start(record) - accuracy_at(record, 0)


def validity(runs: dict, required_gain: float = VALIDITY_GAIN) -> tuple[Interval, bool]:
    """Whether DAPO as published learnt enough for the margin to mean something: the lower end of its mean gain's
    interval is at least `required_gain`."""
    interval = t_interval([gain(record) for record in runs.get("dapo", {}).values() if record["complete"]])
    return interval, not math.isnan(interval.low) and interval.low >= required_gain


def interpolated_accuracy(record: dict, tokens: float) -> float:
    """The pass rate at `tokens` generated completion tokens, read linearly between the run's evaluations (step 0
    at 0 tokens)."""
    xs, ys = record["eval_tokens"], record["accuracy"]
    if not xs[0] <= tokens <= xs[-1]:
        raise ValueError(f"interpolated_accuracy: {tokens} tokens is outside the run's {xs[0]}..{xs[-1]}.")
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=False):
        if x0 <= tokens <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
    raise AssertionError("unreachable: tokens lies within the evaluations")


def equal_token_differences(runs: dict) -> tuple[int | None, list[float]]:
    """(b) at equal generated tokens: the fewest tokens any complete `grpo` or `dapo` run of a complete pair
    reached by its last step, and dapo - grpo there per seed."""
    seeds = complete_seeds(runs, ARMS_OF_B)
    if not seeds:
        return None, []
    budget = min(runs[arm][seed]["eval_tokens"][-1] for arm in ARMS_OF_B for seed in seeds)
    return budget, [interpolated_accuracy(runs["dapo"][seed], budget)
                    - interpolated_accuracy(runs["grpo"][seed], budget) for seed in seeds]


def equal_tokens(runs: dict) -> tuple[int | None, Interval]:
    """`equal_token_differences` as the budget and the interval over seeds."""
    budget, differences = equal_token_differences(runs)
    return budget, t_interval(differences)


def probe_steps(record: dict) -> list[dict]:
    """The probe's counts for each optimizer step the run trained (generated-at steps 0 .. last step - 1)."""
    last = record["eval_steps"][-1]
    return [record["probe"].get(str(step), {}) for step in range(last)]


def logged_series(record: dict, key: str) -> list[float]:
    """The logged value of `key` at each step 1 .. last step (0 where a step did not log it)."""
    values = record["logged"].get(key, {})
    return [values.get(str(step), 0.0) for step in range(1, record["eval_steps"][-1] + 1)]


def informative_groups_trained(record: dict) -> list[float]:
    """Groups trained with a nonzero advantage at each step: dynamic sampling's kept groups (carried ones
    included), or, for `GRPOTrainer`, which trains every group it generates, those whose rewards differ."""
    if record["arm"] == "grpo":
        return [counts.get("groups", 0) - counts.get("equal_score_groups", 0) for counts in probe_steps(record)]
    return logged_series(record, "dynamic_sampling/kept_groups")


def generation_per_informative_row(record: dict) -> float:
    """(c): completions generated over rows trained with a nonzero advantage, over the whole run."""
    generated = sum(counts.get("completions", 0) for counts in probe_steps(record))
    rows = sum(informative_groups_trained(record)) * record["settings"]["num_generations"]
    return generated / rows if rows else math.inf


def stretches(record: dict) -> list[tuple[int, int]]:
    last = record["eval_steps"][-1]
    return [(start + 1, min(start + STRETCH, last)) for start in range(0, last, STRETCH)]


def group_shares(record: dict) -> list[dict]:
    """Per stretch of steps: shares of generated groups with equal scores, all right and all wrong."""
    rows = []
    for first, last in stretches(record):
        counts = probe_steps(record)[first - 1 : last]
        groups = sum(count.get("groups", 0) for count in counts)
        share = {key: sum(count.get(key, 0) for count in counts) / groups if groups else math.nan
                 for key in ("equal_score_groups", "all_correct", "all_wrong")}
        rows.append({"steps": (first, last), "groups": groups, **share})
    return rows


def skipping_activity(record: dict) -> list[dict]:
    """Per stretch of steps: prompts skipped, prompts considered (skipped + generated groups), groups carried and
    generation rounds, from the trainer's logged metrics."""
    skipped = logged_series(record, "dynamic_sampling/skipped_prompts")
    generated = logged_series(record, "dynamic_sampling/generated_groups")
    carried = logged_series(record, "dynamic_sampling/carried_groups")
    rounds = logged_series(record, "dynamic_sampling/rounds")
    rows = []
    for first, last in stretches(record):
        part = slice(first - 1, last)
        considered = sum(skipped[part]) + sum(generated[part])
        rows.append({"steps": (first, last), "skipped": sum(skipped[part]), "considered": considered,
                     "carried": sum(carried[part]), "rounds": sum(rounds[part])})
    return rows


def skipped_share(record: dict) -> float:
    """Prompts skipped over prompts considered, over the whole run."""
    activity = skipping_activity(record)
    considered = sum(row["considered"] for row in activity)
    return sum(row["skipped"] for row in activity) / considered if considered else math.nan


def groups_per_problem(record: dict) -> dict[str, int]:
    """Groups generated for each training problem (by its reasoning-gym index) over the whole run."""
    totals = {str(index): 0 for index in record["train_indices"]}
    for counts in probe_steps(record):
        for key, value in counts.items():
            if key.startswith("groups_of/"):
                index = key.split("/", 1)[1]
                totals[index] = totals.get(index, 0) + value
    return totals


def grpo_flattening(runs: dict) -> tuple[float, Interval]:
    """Reported, not deciding: the share of `grpo`'s mean gain by its last step that came after step 5 (on the
    means over seeds), and the interval of its gain from step 10 to its last step."""
    records = [record for record in runs.get("grpo", {}).values() if record["complete"]]
    if not records:
        return math.nan, t_interval([])
    last = records[0]["eval_steps"][-1]
    mean = {step: statistics.fmean(accuracy_at(record, step) for record in records) for step in (0, 5, last)}
    share = (mean[last] - mean[5]) / (mean[last] - mean[0]) if mean[last] != mean[0] else math.nan
    return share, t_interval([accuracy_at(record, last) - accuracy_at(record, 10) for record in records])


# The outcomes of the method's decision, and the DAPOConfig defaults each sets (None: nothing is decided yet).
DECIDED_DEFAULTS = {
    "pending": None,
    "invalid": {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": False},
    "non_inferior": {"skip_degenerate_prompts": True, "dynamic_sampling_carry_surplus": True},
    # Both outcomes of the fallback turn skipping off, so a failed (a) settles skipping before `carry_only` is in.
    "pending_carry_only": {"skip_degenerate_prompts": False},
    "carry_only_passes": {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": True},
    "carry_only_fails": {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": False},
}


def decide(runs: dict, seeds: list[int]) -> str:
    """The method's decision, one of DECIDED_DEFAULTS' outcomes: nothing before every seed of (a)'s arms is in; the
    validity check before (a); if (a) fails, the `carry_only` arm on every seed decides which part turns off."""
    if len(complete_seeds(runs, ARMS_OF_A)) < len(seeds):
        return "pending"
    if not validity(runs)[1]:
        return "invalid"
    if non_inferiority(runs)[1]:
        return "non_inferior"
    carry = paired(runs, "carry_only", "dapo", mean_after_start)
    if carry.n < len(seeds):
        return "pending_carry_only"
    return "carry_only_passes" if carry.low > -MARGIN else "carry_only_fails"
