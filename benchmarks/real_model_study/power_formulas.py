"""The power calculation's formulas: sampling noise of an evaluation, non-inferiority and detection power of a
paired t-interval over seeds (noncentral t), their inverses, the study's spread and the grid's CPU cost. Pure
functions, unit-tested in tests/test_real_model_study.py."""

import math
import statistics

from scipy import optimize, stats

TARGET_POWER = 0.8
CONFIDENCE = 0.95


def evaluation_variance(q: float, prompts: int, samples: int) -> float:
    """Sampling variance of one evaluation's pass rate: q / (N k), q the mean of p (1 - p) over its prompts."""
    if prompts < 1 or samples < 1:
        raise ValueError(f"evaluation_variance: prompts={prompts}, samples={samples}; both must be >= 1.")
    return q / (prompts * samples)


def q_from_counts(accuracy: float, always_right: int, always_wrong: int, prompts: int, samples: int) -> float:
    """Mean of p (1 - p) over the prompts of one evaluation known only by its pass rate and its always-right and
    always-wrong counts: those prompts count 0, the mixed ones share the remaining passes equally, and each gives
    the unbiased estimate c (k - c) / (k (k - 1)) of p (1 - p) from c passes of k."""
    if samples < 2:
        raise ValueError(f"q_from_counts: samples={samples}; the estimate needs k >= 2.")
    mixed = prompts - always_right - always_wrong
    if mixed <= 0:
        return 0.0
    passes = accuracy * prompts * samples - samples * always_right
    mean_passes = passes / mixed
    return mixed * mean_passes * (samples - mean_passes) / (samples * (samples - 1)) / prompts


def q_from_per_prompt(per_prompt: list[int], samples: int) -> float:
    """Mean over prompts of the unbiased estimate c (k - c) / (k (k - 1)) of p (1 - p), from each prompt's passes c."""
    if samples < 2:
        raise ValueError(f"q_from_per_prompt: samples={samples}; the estimate needs k >= 2.")
    return statistics.fmean(count * (samples - count) / (samples * (samples - 1)) for count in per_prompt)


def noninferiority_power(margin: float, sd: float, seeds: int, true_difference: float = 0.0) -> float:
    """Probability that the lower end of the two-sided `CONFIDENCE` t-interval of the mean of `seeds` paired
    differences (spread `sd`, mean `true_difference`) lies above -`margin`."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"noninferiority_power: seeds={seeds} (>= 2) and sd={sd} (> 0) required.")
    df = seeds - 1
    critical = stats.t.ppf((1 + CONFIDENCE) / 2, df)
    return float(stats.nct.sf(critical, df, (true_difference + margin) * math.sqrt(seeds) / sd))


def detection_power(difference: float, sd: float, seeds: int) -> float:
    """Probability that the two-sided `CONFIDENCE` t-interval of the mean of `seeds` paired differences excludes
    zero when the true difference is `difference`."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"detection_power: seeds={seeds} (>= 2) and sd={sd} (> 0) required.")
    df = seeds - 1
    critical = stats.t.ppf((1 + CONFIDENCE) / 2, df)
    noncentrality = difference * math.sqrt(seeds) / sd
    # The lower tail as the upper tail of the mirrored distribution: scipy's nct.cdf returns NaN far in its tail.
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality))


def _root(function, sd: float) -> float:
    """The root of an increasing `function` of a difference, bracketed from sd upward (scipy's noncentral t gives
    NaN far in its tail, so the bracket grows only as far as needed)."""
    high = sd
    while function(high) < 0:
        high *= 2
    return float(optimize.brentq(function, 1e-9, high))


def smallest_margin(sd: float, seeds: int, power: float = TARGET_POWER) -> float:
    """The margin that `noninferiority_power` reaches with `power` at a true difference of 0."""
    return _root(lambda margin: noninferiority_power(margin, sd, seeds) - power, sd)


def smallest_detectable(sd: float, seeds: int, power: float = TARGET_POWER) -> float:
    """The difference that `detection_power` detects with `power`."""
    return _root(lambda difference: detection_power(difference, sd, seeds) - power, sd)


def seeds_needed(margin: float, sd: float, power: float = TARGET_POWER, most: int = 200) -> int | None:
    """The fewest seeds for which `noninferiority_power(margin, sd, seeds)` reaches `power` (None beyond `most`)."""
    return next((seeds for seeds in range(2, most + 1) if noninferiority_power(margin, sd, seeds) >= power), None)


def study_sd(training_variance: float, q: float, prompts: int, samples: int, evaluations: int = 1) -> float:
    """Spread of one seed's paired difference in the study: the training part plus two arms' sampling noise,
    averaged over `evaluations` evaluations."""
    return math.sqrt(max(training_variance, 0.0) + 2 * evaluation_variance(q, prompts, samples) / evaluations)


def grid_cpu_seconds(seeds: int, step_seconds: dict, steps: int, evaluations: int, evaluation_seconds: float) -> float:
    """CPU seconds of the grid: the step-0 evaluation once (same weights, same evaluation seed in every run), then
    per seed and arm `steps` optimizer steps and `evaluations` evaluations."""
    per_seed = sum(steps * seconds + evaluations * evaluation_seconds for seconds in step_seconds.values())
    return evaluation_seconds + seeds * per_seed
