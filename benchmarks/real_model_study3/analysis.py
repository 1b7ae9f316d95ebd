"""Study 3's comparisons as pure functions of its result files' records, exactly as
docs/results/real_model_study3_method.md fixes them: (1) non-inferiority of the defaults against `GRPOTrainer` at
equal generated tokens, (2) DAPO as published against `GRPOTrainer` per step and at equal tokens, (3) the defaults
against DAPO as published per step, (4) generated completions per informative trained row, the validity check, the
instability rule, the realised spread and power, and the decision. No model and no trainer.

A record is one (arm, seed) result file as `study.run` writes it; `runs` maps arm -> seed -> record; `step0` is the
shared step-0 evaluation (`results/runs/step0.json`).
"""

import math
import statistics
from dataclasses import dataclass

from benchmarks.real_model_study import power_formulas
from benchmarks.real_model_study.study_analysis import complete_seeds, paired_differences
from benchmarks.shared.stats import Interval, t_interval

from .design import MARGIN

VALIDITY_GAIN = 2 * MARGIN  # grpo's gain at the last budget must clear this for (1)'s margin to mean something
INSTABILITY_LIMIT = 0.20  # share of held-out completions truncated at the limit, at any evaluation of an arm
MEASURES = ("greedy", "sampled")  # greedy accuracy decides; the sampled pass rate is reported beside it


def point(record: dict, kind: str, budget: int | None = None) -> dict:
    """The run's evaluation of `kind` ("budget" or "fixed_step"), at `budget` for a budget."""
    for evaluation in record["evaluations"]:
        if evaluation["kind"] == kind and (kind != "budget" or evaluation["budget"] == budget):
            return evaluation
    raise ValueError(f"point: the run {record['arm']}-seed{record['seed']} has no {kind} evaluation"
                     + (f" at budget {budget}" if kind == "budget" else "") + ".")


def budgets(record: dict) -> list[int]:
    return list(record["settings"]["token_budgets"])


def score(evaluation: dict, measure: str = "greedy") -> float:
    if measure not in MEASURES:
        raise ValueError(f"score: measure={measure!r}; expected one of {MEASURES}.")
    return evaluation[measure]["pass_rate"]


def at_budget(budget: int, measure: str = "greedy"):
    """The summary "the run's `measure` at `budget` tokens" for `paired`."""
    return lambda record: score(point(record, "budget", budget), measure)


def at_fixed_step(measure: str = "greedy"):
    return lambda record: score(point(record, "fixed_step"), measure)


def over_budgets(measure: str = "greedy"):
    """The summary of (1) and (2) at equal tokens: the mean over the token budgets of the run's `measure`."""
    return lambda record: statistics.fmean(score(point(record, "budget", b), measure) for b in budgets(record))


@dataclass(frozen=True)
class Comparison:
    """One comparison fixed in advance: its per-seed paired differences, their interval, and the realised spread
    and power beside the planned ones. `test` is "non-inferiority" (at `planned_threshold`, the margin) or
    "detection" (`planned_threshold`: the difference the plan sized it to detect)."""

    name: str
    measure: str
    test: str
    differences: tuple
    interval: Interval
    planned_sd: float
    planned_threshold: float

    @property
    def realised_sd(self) -> float:
        return statistics.stdev(self.differences) if len(self.differences) >= 2 else math.nan

    def realised_threshold(self) -> float:
        """The margin (non-inferiority) or difference (detection) the realised spread reaches with 80 % power at
        this many seeds."""
        sd, seeds = self.realised_sd, len(self.differences)
        if math.isnan(sd) or sd == 0:
            return math.nan
        if self.test == "non-inferiority":
            return power_formulas.smallest_margin(sd, seeds)
        return power_formulas.smallest_detectable(sd, seeds)

    def realised_power(self) -> float:
        """The power the realised spread gives at the planned threshold (margin or difference) at this many seeds."""
        sd, seeds = self.realised_sd, len(self.differences)
        if math.isnan(sd) or sd == 0:
            return math.nan
        if self.test == "non-inferiority":
            return power_formulas.noninferiority_power(self.planned_threshold, sd, seeds)
        return power_formulas.detection_power(self.planned_threshold, sd, seeds)

    def passes(self) -> bool:
        """Non-inferiority: the interval's lower end above -planned_threshold. Detection: the interval excludes 0."""
        if self.test == "non-inferiority":
            return not math.isnan(self.interval.low) and self.interval.low > -self.planned_threshold
        return self.interval.excludes_zero()


def comparison(runs, name, arm, other, summary, measure, test, planned_sd, planned_threshold) -> Comparison:
    differences = tuple(paired_differences(runs, arm, other, summary))
    return Comparison(name, measure, test, differences, t_interval(differences), planned_sd, planned_threshold)


def comparisons(runs: dict, plan: dict, measure: str = "greedy") -> dict[str, Comparison]:
    """(1), (2) at the fixed step and at equal tokens, and (3), on `measure`, with the planned spread and threshold
    of each from the plan (plan.json): (1) and (2) at equal tokens on the planning spread of the mean over budgets,
    (2) and (3) at the fixed step on study 2's per-step spread."""
    chosen, detect = plan["chosen"], plan["detectable_at_chosen_seeds"]
    per_step_sd = plan["realised"]["(b) `dapo` - `grpo` at equal steps"]["sd"]
    equal_tokens, fixed = over_budgets(measure), at_fixed_step(measure)
    return {
        "(1)": comparison(runs, "(1) `defaults` - `grpo` at equal tokens, mean over budgets", "defaults", "grpo",
                          equal_tokens, measure, "non-inferiority", chosen["sd_planning"], MARGIN),
        "(2) tokens": comparison(runs, "(2) `dapo` - `grpo` at equal tokens, mean over budgets", "dapo", "grpo",
                                 equal_tokens, measure, "detection", chosen["sd_planning"],
                                 detect["(2) at equal tokens, mean over budgets"]),
        "(2) step": comparison(runs, "(2) `dapo` - `grpo` at the fixed step", "dapo", "grpo", fixed, measure,
                               "detection", per_step_sd,
                               detect["(2) and (3) at the fixed step (study 2's mean per-step SD)"]),
        "(3)": comparison(runs, "(3) `defaults` - `dapo` at the fixed step", "defaults", "dapo", fixed, measure,
                          "detection", per_step_sd,
                          detect["(2) and (3) at the fixed step (study 2's mean per-step SD)"]),
    }  # fmt: skip


def last_budget_step(record: dict) -> int:
    """The optimizer step whose weights the last token budget evaluated (a generation-batch boundary)."""
    return point(record, "budget", budgets(record)[-1])["step"]


def informative_groups_trained(record: dict, before_step: int) -> float:
    """Groups trained with a nonzero advantage by the batches generated before `before_step`: dynamic sampling's
    kept groups (carried ones included, logged at each batch's first step), or, for `GRPOTrainer`, which trains
    every group it generates, those whose rewards differ (the probe's counts)."""
    if record["arm"] == "grpo":
        return informative_groups_generated(record, before_step)
    kept = record["logged"].get("dynamic_sampling/kept_groups", {})
    return sum(value for at, value in kept.items() if int(at) <= before_step)


def informative_groups_generated(record: dict, before_step: int) -> int:
    """Groups whose rewards differ among those the batches generated before `before_step` (every round)."""
    return sum(counts["groups"] - counts["equal_score_groups"]
               for at, counts in record["probe"].items() if int(at) < before_step)


def generation_per_informative_row(record: dict) -> float:
    """(4): completions generated by the batches that trained before the last budget's evaluation (every round,
    dropped and carried groups included), over the rows those batches trained with a nonzero advantage. Groups a
    run carries past that boundary count as generated and not yet as trained (`informative_untrained` counts them)."""
    last = last_budget_step(record)
    generated = sum(counts["completions"] for at, counts in record["probe"].items() if int(at) < last)
    rows = informative_groups_trained(record, last) * record["settings"]["num_generations"]
    return generated / rows if rows else math.inf


def informative_untrained(record: dict) -> float:
    """Informative groups generated before the last budget's boundary that no batch before it trained: dropped as
    surplus (DAPO as published) or carried past the boundary (the defaults)."""
    last = last_budget_step(record)
    return informative_groups_generated(record, last) - informative_groups_trained(record, last)


def generation_comparisons(runs: dict, plan: dict) -> dict[str, Comparison]:
    """(4) as paired differences `defaults` - `dapo` and `dapo` - `grpo`; the plan sized only the first."""
    planned_sd = math.nan
    return {
        "defaults - dapo": comparison(runs, "(4) `defaults` - `dapo`", "defaults", "dapo",
                                      generation_per_informative_row, "completions", "detection", planned_sd,
                                      plan["detectable_generation"]),
        "dapo - grpo": comparison(runs, "(4) `dapo` - `grpo`", "dapo", "grpo", generation_per_informative_row,
                                  "completions", "detection", planned_sd, math.nan),
    }


def validity(runs: dict, step0: dict, required_gain: float = VALIDITY_GAIN) -> tuple[Interval, bool]:
    """Whether `grpo` learnt enough for (1)'s margin to mean something: the lower end of the interval of its greedy
    gain at the last budget over step 0 is at least `required_gain`."""
    gains = [score(point(record, "budget", budgets(record)[-1])) - step0["greedy"]["pass_rate"]
             for record in runs.get("grpo", {}).values() if record["complete"]]
    interval = t_interval(gains)
    return interval, not math.isnan(interval.low) and interval.low >= required_gain


def evaluation_labels(record: dict) -> list[tuple[str, dict]]:
    """(label, evaluation) for each of the run's evaluations: budgets in order, then the fixed step."""
    labelled = [(f"{b:,} tokens", point(record, "budget", b)) for b in budgets(record)]
    return labelled + [(f"step {e['step']}", e) for e in record["evaluations"] if e["kind"] == "fixed_step"]


def truncation(runs: dict, arm: str) -> dict[str, dict[str, list[float]]]:
    """Per evaluation label and measure, the truncated share of each complete run of `arm`, in seed order."""
    table: dict[str, dict[str, list[float]]] = {}
    for seed in complete_seeds(runs, (arm,)):
        for label, evaluation in evaluation_labels(runs[arm][seed]):
            for measure in MEASURES:
                table.setdefault(label, {}).setdefault(measure, []).append(evaluation[measure]["truncated_fraction"])
    return table


def unstable_runs(runs: dict, limit: float = INSTABILITY_LIMIT) -> list[tuple[str, int, str, str, float]]:
    """(arm, seed, evaluation, measure, share) wherever a complete run truncated more than `limit` of its held-out
    completions: no decision rests on that arm until the cause is found."""
    return [(arm, seed, label, measure, evaluation[measure]["truncated_fraction"])
            for arm in runs for seed in complete_seeds(runs, (arm,))
            for label, evaluation in evaluation_labels(runs[arm][seed])
            for measure in MEASURES if evaluation[measure]["truncated_fraction"] > limit]


def logged_mean(record: dict, key: str, first: int, last: int) -> float:
    """The mean of `key` over the steps first..last that logged it (NaN if none did)."""
    values = [value for at, value in record["logged"].get(key, {}).items() if first <= int(at) <= last]
    return statistics.fmean(values) if values else math.nan


def clip_by_batch(runs: dict, arm: str, key: str = "clip_ratio/high_mean") -> list[tuple[int, int, float, int]]:
    """Per generation batch (steps first..last), the mean over `arm`'s complete runs of each run's mean `key` over
    the batch's steps, and how many runs trained that batch: clip-higher shown acting, not assumed."""
    seeds = complete_seeds(runs, (arm,))
    if not seeds:
        return []
    per_batch = runs[arm][seeds[0]]["settings"]["steps_per_generation"]
    last = max(len(runs[arm][seed]["step_cpu_seconds"]) for seed in seeds)
    rows = []
    for first in range(1, last + 1, per_batch):
        means = [logged_mean(runs[arm][seed], key, first, first + per_batch - 1) for seed in seeds]
        means = [value for value in means if not math.isnan(value)]
        rows.append((first, first + per_batch - 1, statistics.fmean(means) if means else math.nan, len(means)))
    return rows


def carried_groups_trained(record: dict, by_step: int) -> float:
    """Carried groups trained by the batches that began at or before `by_step` (logged at each batch's first
    step): how much of the run's evaluations carrying could have reached."""
    carried = record["logged"].get("dynamic_sampling/carried_groups", {})
    return sum(value for at, value in carried.items() if int(at) <= by_step)


def carried_ratio(runs: dict, arm: str) -> tuple[float, float, int]:
    """The per-token policy ratio of carried rows over `arm`'s complete runs: the mean of the logged per-step means,
    the largest logged maximum, and how many optimizer steps trained carried rows (the instability rule looks here
    first)."""
    means, maxima = [], []
    for seed in complete_seeds(runs, (arm,)):
        logged = runs[arm][seed]["logged"]
        means += list(logged.get("dynamic_sampling/carried_ratio_mean", {}).values())
        maxima += list(logged.get("dynamic_sampling/carried_ratio_max", {}).values())
    return (statistics.fmean(means) if means else math.nan, max(maxima, default=math.nan), len(means))


DECISIONS = {
    "pending": "no decision: not every seed of the compared arms is in",
    "held": "no decision rests on an arm that truncated more than 20 % at an evaluation until the cause is found",
    "carrying_off": "(3)'s interval lies entirely below 0: carrying defaults to off",
    "invalid": "the validity check failed: the runs learnt too little to judge (1); nothing changes",
    "non_inferior": "(1) passes: the defaults were shown to lose less than the margin to `GRPOTrainer` at equal "
                    "generated tokens; no default changes",
    "not_shown": "(1) fails: non-inferiority at equal tokens was not shown; no default changes on (1) alone",
}


def decide(runs: dict, step0: dict, plan: dict, seeds) -> list[str]:
    """The method's decision as keys of DECISIONS, in the order the method reads them: nothing before every seed of
    the three arms is in; an unstable arm holds every decision resting on it; (3) on its own; then validity
    before (1)."""
    if len(complete_seeds(runs, ("grpo", "dapo", "defaults"))) < len(seeds):
        return ["pending"]
    unstable = {arm for arm, *_ in unstable_runs(runs)}
    found = comparisons(runs, plan)
    outcomes = []
    if unstable & {"defaults", "dapo"}:
        outcomes.append("held")
    elif found["(3)"].interval.high < 0:
        outcomes.append("carrying_off")
    if unstable & {"defaults", "grpo"}:
        return [*outcomes, "held"] if "held" not in outcomes else outcomes
    if not validity(runs, step0)[1]:
        return [*outcomes, "invalid"]
    return [*outcomes, "non_inferior" if found["(1)"].passes() else "not_shown"]
