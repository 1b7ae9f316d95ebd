"""A study's comparisons as pure functions of its result files' records: each arm's score at a token budget
(interpolated between its readings on both sides, budgets.py), after a number of optimizer updates (interpolated in
updates between its readings) or after the fixed step, paired (same-seed)
differences between arms with their 95 % t-interval, non-inferiority, "ahead" or detection, the realised spread and
power, generation per informative trained row, and the tokens an arm needs to reach another arm's score (first
crossing of its piecewise-linear curve in tokens) with a seeded bootstrap interval of their median over seeds. No
model and no trainer.

A record is one (arm, seed) result file as the runner writes it; `runs` maps arm -> seed -> record.
"""

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from benchmarks.shared.stats import Interval, t_interval

from .budgets import interpolate

TARGET_POWER = 0.8
CONFIDENCE = 0.95
MEASURES = ("greedy", "sampled")  # greedy accuracy and the sampled pass rate of the held-out set
TESTS = ("non-inferiority", "ahead", "detection")
# Where a comparison reads the arms: at matched generated tokens, at matched optimizer updates, after the fixed step,
# or in completions generated per informative trained row.
READINGS = ("tokens", "updates", "fixed_step", "generation")
# Whether a comparison's method fixed it before the runs (only these decide), or it was read afterwards: exploratory
# (a question the method did not ask) or post hoc (chosen after seeing the results).
FIXED = "fixed in advance"
STATUSES = (FIXED, "exploratory", "post hoc")
BOOTSTRAP_RESAMPLES = 10_000


# Power of a paired t-interval over seeds (noncentral t).

def noninferiority_power(margin: float, sd: float, seeds: int, true_difference: float = 0.0) -> float:
    """Probability that the lower end of the two-sided t-interval of the mean of `seeds` paired differences
    (spread `sd`, mean `true_difference`) lies above -`margin`."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"noninferiority_power: seeds={seeds} (>= 2) and sd={sd} (> 0) required.")
    critical = stats.t.ppf((1 + CONFIDENCE) / 2, seeds - 1)
    return float(stats.nct.sf(critical, seeds - 1, (true_difference + margin) * math.sqrt(seeds) / sd))


def detection_power(difference: float, sd: float, seeds: int) -> float:
    """Probability that the two-sided t-interval of the mean of `seeds` paired differences excludes zero when the
    true difference is `difference`."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"detection_power: seeds={seeds} (>= 2) and sd={sd} (> 0) required.")
    critical = stats.t.ppf((1 + CONFIDENCE) / 2, seeds - 1)
    noncentrality = difference * math.sqrt(seeds) / sd
    # The lower tail as the upper tail of the mirrored distribution: scipy's nct.cdf returns NaN far in its tail.
    return float(stats.nct.sf(critical, seeds - 1, noncentrality) + stats.nct.sf(critical, seeds - 1, -noncentrality))


def _root(function, sd: float) -> float:
    high = sd
    while function(high) < 0:
        high *= 2
    # The bracket scales with `sd`: paired differences equal up to rounding have an SD far below any fixed bound.
    return float(optimize.brentq(function, sd * 1e-9, high, xtol=sd * 1e-12))


def smallest_margin(sd: float, seeds: int, power: float = TARGET_POWER) -> float:
    """The margin `noninferiority_power` reaches with `power` at a true difference of 0."""
    return _root(lambda margin: noninferiority_power(margin, sd, seeds) - power, sd)


def smallest_detectable(sd: float, seeds: int, power: float = TARGET_POWER) -> float:
    """The difference `detection_power` detects with `power`."""
    return _root(lambda difference: detection_power(difference, sd, seeds) - power, sd)


def seeds_needed(margin: float, sd: float, power: float = TARGET_POWER, most: int = 200) -> int | None:
    """The fewest seeds at which `noninferiority_power(margin, sd, seeds)` reaches `power` (None beyond `most`)."""
    return next((seeds for seeds in range(2, most + 1) if noninferiority_power(margin, sd, seeds) >= power), None)


# Reading a run.

def score(evaluation: dict, measure: str = "greedy") -> float:
    """The point's `measure`; NaN where the point did not measure it (`Settings.sampled_budgets`)."""
    if measure not in MEASURES:
        raise ValueError(f"score: measure={measure!r}; expected one of {MEASURES}.")
    measured = evaluation.get(measure)
    return math.nan if measured is None else measured["pass_rate"]


def budgets_measured(settings: dict, measure: str = "greedy") -> list[int]:
    """The budgets at which a run's settings (as its record stores them) measure `measure`: every budget for greedy
    accuracy, `sampled_budgets` (None: every budget) for the sampled pass rate."""
    chosen = settings.get("sampled_budgets") if measure == "sampled" else None
    return [budget for budget in settings["token_budgets"] if chosen is None or budget in chosen]


def readings(record: dict, budget: int) -> tuple[dict, dict | None]:
    """The run's (below, above) evaluations at `budget` (above None when below is exactly at it)."""
    sides = {point["side"]: point for point in record["evaluations"]
             if point["kind"] == "budget" and point["budget"] == budget}
    if "below" not in sides or ("above" not in sides and sides["below"]["tokens"] != budget):
        raise ValueError(f"readings: the run {record['arm']}-seed{record['seed']} was not read on both sides of "
                         f"{budget} tokens.")
    return sides["below"], sides.get("above")


def at_budget(budget: int, measure: str = "greedy"):
    """The summary "the run's `measure` at exactly `budget` tokens", interpolated in tokens."""
    return interpolated_at(budget, lambda point: score(point, measure))


def interpolated_at(budget: int, value):
    """The summary "`value(point)` at exactly `budget` tokens", interpolated in tokens between the run's readings on
    both sides of the budget."""
    def summary(record):
        below, above = readings(record, budget)
        return interpolate(budget, (below["tokens"], value(below)),
                           None if above is None else (above["tokens"], value(above)))
    return summary


def over_budgets(measure: str = "greedy"):
    """The mean over the run's token budgets that measure `measure` (`budgets_measured`) of its interpolated
    `measure`."""
    return lambda record: statistics.fmean(at_budget(b, measure)(record)
                                           for b in budgets_measured(record["settings"], measure))


def at_fixed_step(measure: str = "greedy"):
    def summary(record):
        point = next((p for p in record["evaluations"] if p["kind"] == "fixed_step"), None)
        if point is None:
            raise ValueError(f"at_fixed_step: the run {record['arm']}-seed{record['seed']} has no fixed-step point.")
        return score(point, measure)
    return summary


def generation_per_informative_row(record: dict) -> float:
    """Completions generated (every round, dropped and carried groups included) by the batches before the last
    budget's reading below, over the rows those batches trained with a nonzero advantage: dynamic sampling's kept
    groups (logged at each batch's first step), or for `GRPOTrainer`, which trains every group it generates, the
    groups whose rewards differ."""
    last = readings(record, record["settings"]["token_budgets"][-1])[0]["step"]
    generated = sum(counts["completions"] for at, counts in record["probe"].items() if int(at) < last)
    kept = record["logged"].get("dynamic_sampling/kept_groups")
    if kept is None:
        groups = sum(counts["groups"] - counts["equal_score_groups"]
                     for at, counts in record["probe"].items() if int(at) < last)
    else:
        groups = sum(value for at, value in kept.items() if int(at) <= last)
    rows = groups * record["settings"]["num_generations"]
    return generated / rows if rows else math.inf


def updates_at(budget: int):
    """The summary "optimizer updates the run had made at exactly `budget` tokens": its readings' steps, interpolated
    in tokens as the scores are."""
    return interpolated_at(budget, lambda point: point["step"])


def at_updates(updates: int, measure: str = "greedy"):
    """The summary "the run's `measure` after exactly `updates` optimizer updates": its readings that measured
    `measure` (every evaluation point, at its `step`), interpolated linearly in updates between the last at or below
    `updates` and the first above it, as `at_budget` interpolates in tokens. Readings at one step (one boundary read
    for two budgets) are one point, their mean. Step 0's shared evaluation is not in a run's record, so `updates`
    must lie within the run's readings."""
    def summary(record):
        by_step: dict = {}
        for point in record["evaluations"]:
            value = score(point, measure)
            if not math.isnan(value):
                by_step.setdefault(point["step"], []).append(value)
        steps = sorted(by_step)
        below = [step for step in steps if step <= updates]
        above = [step for step in steps if step > updates]
        if not below or (below[-1] != updates and not above):
            raise ValueError(f"at_updates: the run {record['arm']}-seed{record['seed']} was not read ({measure}) on "
                             f"both sides of {updates} updates; its readings are at steps {steps}.")
        before = (below[-1], statistics.fmean(by_step[below[-1]]))
        after = (above[0], statistics.fmean(by_step[above[0]])) if below[-1] != updates else None
        return interpolate(updates, before, after)
    return summary


def highest_truncation(record: dict) -> float:
    """The largest share of held-out completions truncated at the length limit at any of the run's evaluations,
    greedy or sampled (the method's instability rule reads it against 20 %)."""
    return max((point[measure]["truncated_fraction"] for point in record["evaluations"] for measure in MEASURES
                if point.get(measure) is not None), default=math.nan)


def logged_mean(key: str):
    """The summary "mean over the run's logged optimizer steps of `key`" (NaN when the run never logged it)."""
    def summary(record):
        values = list(record["logged"].get(key, {}).values())
        return statistics.fmean(values) if values else math.nan
    return summary


# Tokens to reach a target.

def run_curve(record: dict, step0_score: float, measure: str = "greedy") -> list[tuple[int, float]]:
    """The run's (tokens, score) readings in token order, step 0 (`step0_score`, the shared step-0 evaluation) at 0
    tokens first: every evaluation point at its boundary's tokens."""
    points = sorted((point["tokens"], score(point, measure)) for point in record["evaluations"])
    return [(0, step0_score), *points]


def tokens_to_reach(curve, target: float) -> float:
    """The fewest tokens at which the piecewise-linear curve through `curve`'s (tokens, score) points, in token
    order, first reaches `target` (>= target); `math.inf` when no point reaches it (censored at the last reading)."""
    curve = list(curve)
    if not curve or any(b[0] < a[0] for a, b in itertools.pairwise(curve)):
        raise ValueError(f"tokens_to_reach: curve={curve!r}; expected (tokens, score) points in token order.")
    for index, (tokens, value) in enumerate(curve):
        if value >= target:
            if index == 0 or curve[index - 1][0] == tokens:
                return float(tokens)
            before_tokens, before = curve[index - 1]  # below target, else the loop had returned there
            return before_tokens + (target - before) / (value - before) * (tokens - before_tokens)
    return math.inf


def tokens_ratios(runs: dict, arm: str, reference: str, step0_score: float, budget: int,
                  measure: str = "greedy") -> list[float]:
    """Per seed both arms completed, in seed order: the tokens `arm` needs to reach `reference`'s score at exactly
    `budget` tokens (`at_budget`), over `budget`; `math.inf` where `arm`'s curve never reaches it."""
    ratios = []
    for seed in complete_seeds(runs, (arm, reference)):
        target = at_budget(budget, measure)(runs[reference][seed])
        ratios.append(tokens_to_reach(run_curve(runs[arm][seed], step0_score, measure), target) / budget)
    return ratios


def gain_over_step0(runs: dict, arm: str, step0_score: float, budget: int, measure: str = "greedy") -> Interval:
    """`arm`'s score at exactly `budget` tokens less step 0's, per seed it completed, with its t-interval."""
    return t_interval([at_budget(budget, measure)(runs[arm][seed]) - step0_score
                       for seed in complete_seeds(runs, (arm,))])


def tokens_key(arm: str, reference: str) -> str:
    return f"tokens: {arm} to {reference}"


def gain_key(arm: str) -> str:
    return f"gain: {arm} over step 0"


def target_endpoints(runs: dict, pairs, step0_score: float, budget: int) -> dict:
    """For each (arm, reference) in `pairs`, greedy: the median of `tokens_ratios` with its bootstrap interval
    (`tokens_key`), and the reference's gain over step 0 at `budget` (`gain_key`)."""
    found = {}
    for arm, reference in pairs:
        found[tokens_key(arm, reference)] = bootstrap_median(tokens_ratios(runs, arm, reference, step0_score, budget))
        found[gain_key(reference)] = gain_over_step0(runs, reference, step0_score, budget)
    return found


@dataclass(frozen=True)
class MedianInterval:
    """The median over seeds and its bootstrap percentile interval (`math.inf` where censored values dominate)."""

    median: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2) -> str:
        if self.n == 0:
            return "n/a"
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def bootstrap_median(values, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                     confidence: float = CONFIDENCE) -> MedianInterval:
    """The median of `values` (`math.inf` allowed: a censored seed) and its percentile bootstrap interval:
    `resamples` resamples of the values with replacement from `numpy.random.default_rng(seed)`, the medians sorted,
    the interval from the one at 0-based position floor((1 - confidence) / 2 x resamples) to the one at
    ceil((1 + confidence) / 2 x resamples) - 1 (order statistics, so infinite medians need no arithmetic)."""
    values = np.asarray(list(values), dtype=np.float64)
    if resamples < 1 or not 0 < confidence < 1 or np.isnan(values).any() or (values < 0).any():
        raise ValueError(f"bootstrap_median: resamples={resamples} (>= 1), confidence={confidence} (in (0, 1)) "
                         "and values without NaN or negatives required.")
    if values.size == 0:
        return MedianInterval(math.nan, math.nan, math.nan, 0)
    draws = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    medians = np.sort(np.median(values[draws], axis=1))
    low = medians[math.floor((1 - confidence) / 2 * resamples)]
    high = medians[math.ceil((1 + confidence) / 2 * resamples) - 1]
    return MedianInterval(float(np.median(values)), float(low), float(high), int(values.size))


# Comparisons.

def complete_seeds(runs: dict, arms) -> list[int]:
    """Seeds for which every arm in `arms` has a complete run."""
    seed_sets = [{seed for seed, record in runs.get(arm, {}).items() if record["complete"]} for arm in arms]
    return sorted(set.intersection(*seed_sets)) if seed_sets else []


def paired_differences(runs: dict, arm: str, other: str, summary) -> list[float]:
    """summary(arm's run) - summary(other's run), per seed that both completed, in seed order."""
    return [summary(runs[arm][seed]) - summary(runs[other][seed]) for seed in complete_seeds(runs, (arm, other))]


@dataclass(frozen=True)
class ComparisonSpec:
    """One comparison: `arm` - `other` at matched tokens ("tokens": the mean over the budgets, or at `budget` alone),
    at `updates` optimizer updates ("updates"), after the fixed step ("fixed_step") or in generated completions per
    informative row ("generation"). `test` is "non-inferiority" at `threshold` (the margin), "ahead" (the interval
    entirely above 0) or "detection" (the interval excludes 0, in either direction); for the last two `threshold` is
    the difference it was sized for (NaN: none was). `status` says whether the method fixed it before the runs
    (`FIXED`; only these decide) or it is exploratory or post hoc; `budget_status` is that of the readings at each
    budget the report gives beside a mean over budgets (by default post hoc: a method that fixes the mean fixes no
    budget's reading)."""

    name: str
    arm: str
    other: str
    at: str
    test: str
    threshold: float
    planned_sd: float = math.nan
    status: str = FIXED
    budget: int | None = None
    updates: int | None = None
    budget_status: str = "post hoc"

    def __post_init__(self):
        problems = []
        if self.test not in TESTS:
            problems.append(f"test={self.test!r}; expected one of {TESTS}")
        if self.at not in READINGS:
            problems.append(f"at={self.at!r}; expected one of {READINGS}")
        for field in ("status", "budget_status"):
            if getattr(self, field) not in STATUSES:
                problems.append(f"{field}={getattr(self, field)!r}; expected one of {STATUSES}")
        if (self.updates is None) == (self.at == "updates") or not (self.updates is None or self.updates >= 1):
            problems.append(f"updates={self.updates!r}; expected an integer >= 1 with at='updates' and None otherwise")
        if self.budget is not None and (self.at != "tokens" or self.budget <= 0):
            problems.append(f"budget={self.budget!r}; expected a positive budget with at='tokens', or None")
        if problems:
            raise ValueError(f"ComparisonSpec {self.name!r}: {'; '.join(problems)}.")

    def arms_text(self) -> str:
        return f"`{self.arm}` - `{self.other}`"

    def reading(self, budgets, fixed_step: int | None = None) -> str:
        """Where it reads the arms, in words: "mean of 4,000 and 8,000 tokens", "at 8,000 tokens", "at 12 updates",
        "after step 12", "completions per informative row"."""
        if self.at == "tokens":
            if self.budget is not None:
                return f"at {self.budget:,} tokens"
            named = [f"{budget:,}" for budget in budgets]
            if len(named) == 1:
                return f"at {named[0]} tokens"
            return f"mean of {', '.join(named[:-1])} and {named[-1]} tokens"
        if self.at == "updates":
            return f"at {self.updates} updates"
        if self.at == "fixed_step":
            return f"after step {fixed_step}"
        return "completions per informative row"

    def per_budget(self, budgets) -> list["ComparisonSpec"]:
        """A mean over several budgets' readings at each budget alone: detection, sized for nothing, with
        `budget_status`; none for any other comparison."""
        if self.at != "tokens" or self.budget is not None or len(budgets) < 2:
            return []
        return [dataclasses.replace(self, budget=budget, test="detection", threshold=math.nan, planned_sd=math.nan,
                                    status=self.budget_status) for budget in budgets]


@dataclass(frozen=True)
class Comparison:
    spec: ComparisonSpec
    measure: str
    differences: tuple
    interval: Interval

    @property
    def realised_sd(self) -> float:
        return statistics.stdev(self.differences) if len(self.differences) >= 2 else math.nan

    def realised_threshold(self) -> float:
        """The margin (non-inferiority) or difference (ahead, detection) the realised spread reaches with 80 %
        power."""
        sd, seeds = self.realised_sd, len(self.differences)
        if math.isnan(sd) or sd == 0:
            return math.nan
        # "ahead" at a true difference d needs the lower end above 0: non-inferiority's power with d for the margin.
        return (smallest_detectable if self.spec.test == "detection" else smallest_margin)(sd, seeds)

    def realised_power(self) -> float:
        """The power the realised spread gives at the planned threshold at this many seeds."""
        sd, seeds = self.realised_sd, len(self.differences)
        if math.isnan(sd) or sd == 0 or math.isnan(self.spec.threshold):
            return math.nan
        if self.spec.test == "non-inferiority":
            return noninferiority_power(self.spec.threshold, sd, seeds)
        if self.spec.test == "ahead":
            return noninferiority_power(0.0, sd, seeds, true_difference=self.spec.threshold)
        return detection_power(self.spec.threshold, sd, seeds)

    def passes(self) -> bool:
        """Non-inferiority: the interval's lower end above -threshold. Ahead: above 0. Detection: the interval
        excludes 0."""
        if self.spec.test == "non-inferiority":
            return not math.isnan(self.interval.low) and self.interval.low > -self.spec.threshold
        if self.spec.test == "ahead":
            return not math.isnan(self.interval.low) and self.interval.low > 0
        return self.interval.excludes_zero()

    def verdict(self) -> str:
        if self.interval.n < 2:
            return "too few seeds"
        if self.spec.test == "non-inferiority":
            return (f"non-inferior at {self.spec.threshold:.3f}" if self.passes()
                    else f"non-inferiority at {self.spec.threshold:.3f} not shown")
        if self.spec.test == "ahead":
            return "ahead" if self.passes() else f"not shown ahead (80 % power at {self.realised_threshold():.3f})"
        return "difference" if self.passes() else \
            f"no difference detected (80 % power at {self.realised_threshold():.3f})"


def summary_of(spec: ComparisonSpec, measure: str = "greedy"):
    """The per-run summary `spec` compares."""
    if spec.at == "tokens":
        return over_budgets(measure) if spec.budget is None else at_budget(spec.budget, measure)
    if spec.at == "updates":
        return at_updates(spec.updates, measure)
    if spec.at == "fixed_step":
        return at_fixed_step(measure)
    return generation_per_informative_row


def compare(runs: dict, spec: ComparisonSpec, measure: str = "greedy") -> Comparison:
    differences = tuple(paired_differences(runs, spec.arm, spec.other, summary_of(spec, measure)))
    return Comparison(spec, measure, differences, t_interval(differences))
