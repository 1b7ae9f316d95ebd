"""Power calculation of the real-model study: how many seeds, how large a held-out set, and which non-inferiority
margin the budget reaches, from the spread of the 12 committed runs of the first real-model benchmark and the
costs measured on this machine.

    python benchmarks/real_model_study/power.py [--old-results DIR] [--budget-hours 12]

Model. For one comparison and one seed, the paired difference between two arms is a training part (the two runs'
trajectories differ by seed) plus evaluation sampling noise. An evaluation of N prompts x k samples whose prompts
have pass rates p_i has sampling variance sum_i p_i (1 - p_i) / (N**2 k) = q / (N k), q the mean of p (1 - p)
over prompts. The old runs' seed-to-seed variance of a paired difference, minus twice their own evaluation
variance (40 x 4; q estimated from each evaluation's always-right/always-wrong counts), is the training part; the
study's variance is that training part plus twice q / (N k), divided by E for a mean over E evaluations. Arms are
treated as independent at each evaluation although they share the evaluation's random seed: that shared seed
only lowers the noise of a difference, so treating them as independent overstates the study's spread.

Tests. (a) non-inferiority: the lower end of the two-sided 95 % t-interval of the mean paired difference over n
seeds must exceed -margin; power when the true difference is 0 from the noncentral t distribution. (b), (c): a
two-sided 95 % t-test; the smallest difference detected with 80 % power.

Costs: one evaluation's CPU seconds per sample (the pilot, `results/pilot.json`), CPU seconds per optimizer step of
`GRPOTrainer` on the chosen task (the training pilot, `results/training_pilot.json`), and the dynamic-sampling arms'
extra CPU per step over `GRPOTrainer` in the old runs (regeneration rounds), all at one torch thread.
"""

import argparse
import glob
import json
import math
import os
import statistics

from scipy import optimize, stats

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# Where the first benchmark's result files were when this ran; a reorganized tree passes --old-results.
OLD_RESULTS = os.path.join(HERE, "..", "results", "real_model")
TARGET_POWER = 0.8
CONFIDENCE = 0.95
WANTED_MARGIN = 0.03

# The comparisons fixed in advance, as (arm, baseline) of the old runs standing in for the study's arms.
COMPARISONS = {
    "a: defaults - DAPO as published": ("dapo_skip_carry", "dapo"),
    "b: DAPO as published - GRPOTrainer": ("dapo", "grpo"),
}


# Pure statistics (unit-tested).


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


# The old runs.


def load_old_runs(directory: str) -> dict:
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*-seed*.json"))):
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
        runs[(run["arm"], run["seed"])] = run
    if not runs:
        raise FileNotFoundError(f"power.py: no result files (ARM-seedS.json) in {directory}; pass --old-results.")
    return runs


def old_q(run: dict, index: int) -> float:
    settings = run["settings"]
    return q_from_counts(run["accuracy"][index], run["always_right"][index], run["always_wrong"][index],
                         settings["held_out_prompts"], settings["eval_samples"])


def accuracy_at_tokens(run: dict, tokens: float) -> float:
    import numpy

    return float(numpy.interp(tokens, run["eval_tokens"], run["accuracy"]))


def old_spread(runs: dict) -> dict:
    """Per comparison: the seed-to-seed variance of the paired difference per evaluation step (pooled over the
    steps after 0), of its mean over those evaluations and at equal generated tokens, each with the old runs' own
    evaluation variance and the training part left after subtracting it."""
    seeds = sorted({seed for _, seed in runs})
    out = {}
    for name, (arm, baseline) in COMPARISONS.items():
        pairs = [(runs[(arm, seed)], runs[(baseline, seed)]) for seed in seeds]
        steps = pairs[0][0]["eval_steps"]
        prompts, samples = (pairs[0][0]["settings"][key] for key in ("held_out_prompts", "eval_samples"))
        later = range(1, len(steps))
        per_step = {steps[i]: statistics.variance([a["accuracy"][i] - b["accuracy"][i] for a, b in pairs])
                    for i in later}
        old_eval = statistics.fmean(evaluation_variance(old_q(run, i), prompts, samples)
                                    for pair in pairs for run in pair for i in later)
        mean_over = statistics.variance([statistics.fmean(a["accuracy"][i] - b["accuracy"][i] for i in later)
                                         for a, b in pairs])
        tokens = min(run["eval_tokens"][-1] for run in runs.values())
        at_tokens = statistics.variance([accuracy_at_tokens(a, tokens) - accuracy_at_tokens(b, tokens)
                                         for a, b in pairs])
        pooled = statistics.fmean(per_step.values())
        out[name] = {
            "seeds": len(seeds), "evaluations_after_step_0": len(later), "old_prompts": prompts,
            "old_samples": samples, "old_evaluation_variance": old_eval,
            "per_step_sd": {str(step): math.sqrt(value) for step, value in per_step.items()},
            "pooled_per_step_sd": math.sqrt(pooled), "mean_over_evaluations_sd": math.sqrt(mean_over),
            "equal_tokens": tokens, "equal_tokens_sd": math.sqrt(at_tokens),
            "training_variance": {"per_step": pooled - 2 * old_eval,
                                  "mean_over_evaluations": mean_over - 2 * old_eval / len(later),
                                  "equal_tokens": at_tokens - 2 * old_eval},
        }  # fmt: skip
    return out


def old_generation_spread(runs: dict) -> dict:
    """(c): generated completions per informative trained row up to the last step, per run, and the seed-to-seed
    spread of the paired difference defaults - DAPO as published."""
    def per_row(run):
        group = run["settings"]["num_generations"]
        completions = run["eval_completions"][-1]
        if run["arm"] in ("dapo", "dapo_skip_carry"):
            rows = group * sum(run["logged"]["dynamic_sampling/kept_groups"].values())
        else:
            rows = group * sum(c["groups"] - c["equal_score_groups"] for c in run["probe"].values())
        return completions / rows

    seeds = sorted({seed for _, seed in runs})
    values = {arm: [per_row(runs[(arm, seed)]) for seed in seeds] for arm in ("grpo", "dapo", "dapo_skip_carry")}
    differences = [a - b for a, b in zip(values["dapo_skip_carry"], values["dapo"], strict=True)]
    return {"per_run": values, "difference_sd": statistics.stdev(differences),
            "difference_mean": statistics.fmean(differences)}


def old_step_seconds(runs: dict) -> dict:
    """CPU seconds per optimizer step of each old arm at one torch thread (evaluations excluded), mean over seeds."""
    arms = sorted({arm for arm, _ in runs})
    return {arm: statistics.fmean(run["train_cpu_seconds"][-1] / run["eval_steps"][-1]
                                  for (name, _), run in runs.items() if name == arm) for arm in arms}


# The study's design and its cost.


def design_rows(spread: dict, generation: dict, q: float, costs: dict, budget_seconds: float, steps: int,
                eval_every: int, prompts_options, samples_options) -> list[dict]:
    """For each held-out size and samples per prompt: the seeds the budget affords, and at that many seeds the
    margin (a) reaches and the differences (b) and (c) detect with 80 % power, on the planning spread (training
    part from the old runs, at least 0) and on the conservative one (the old runs' whole spread as training part)."""
    evaluations = steps // eval_every
    rows = []
    for prompts in prompts_options:
        for samples in samples_options:
            evaluation_seconds = costs["evaluation_cpu_seconds_per_sample"] * prompts * samples
            per_seed = grid_cpu_seconds(1, costs["step_cpu_seconds"], steps, evaluations, evaluation_seconds)
            affordable = int((budget_seconds - evaluation_seconds) // (per_seed - evaluation_seconds))
            row = {"prompts": prompts, "samples": samples, "evaluations": evaluations,
                   "evaluation_cpu_seconds": evaluation_seconds,
                   "evaluation_se": math.sqrt(evaluation_variance(q, prompts, samples)),
                   "cpu_seconds_per_seed": per_seed - evaluation_seconds, "seeds": affordable}
            for reading in ("planning", "conservative"):
                sds = sds_for(spread, q, prompts, samples, evaluations, conservative=reading == "conservative")
                sd_a = sds["a: defaults - DAPO as published"]["mean_over_evaluations"]
                enough = affordable >= 2
                row[reading] = {
                    "sd": sds,
                    "margin_a": smallest_margin(sd_a, affordable) if enough else math.nan,
                    "seeds_for_margin_0.03": seeds_needed(WANTED_MARGIN, sd_a),
                    "detectable_b": {key: smallest_detectable(sd, affordable) if enough else math.nan
                                     for key, sd in sds["b: DAPO as published - GRPOTrainer"].items()},
                }
            row["detectable_c"] = smallest_detectable(generation["difference_sd"], affordable) if affordable >= 2 \
                else math.nan
            rows.append(row)
    return rows


def sds_for(spread: dict, q: float, prompts: int, samples: int, evaluations: int, conservative: bool) -> dict:
    """The study's spread of a seed's paired difference per comparison: per step, mean over evaluations, at equal
    tokens."""
    out = {}
    for name, old in spread.items():
        if conservative:  # the old runs' whole variance taken as training part
            training = {"per_step": old["pooled_per_step_sd"] ** 2,
                        "mean_over_evaluations": old["mean_over_evaluations_sd"] ** 2,
                        "equal_tokens": old["equal_tokens_sd"] ** 2}
        else:
            training = old["training_variance"]
        out[name] = {
            "per_step": study_sd(training["per_step"], q, prompts, samples),
            "mean_over_evaluations": study_sd(training["mean_over_evaluations"], q, prompts, samples, evaluations),
            "equal_tokens": study_sd(training["equal_tokens"], q, prompts, samples),
        }
    return out


def choose_design(rows: list[dict], least_prompts: int = 300, least_seeds: int = 5) -> dict:
    """The design reaching the smallest margin (a) on the planning spread, among those with at least
    `least_prompts` held-out problems and `least_seeds` seeds affordable; on a tie, the cheaper evaluation."""
    eligible = [row for row in rows if row["prompts"] >= least_prompts and row["seeds"] >= least_seeds]
    if not eligible:
        raise ValueError(f"choose_design: no design affords {least_seeds} seeds with >= {least_prompts} prompts.")
    return min(eligible, key=lambda row: (round(row["planning"]["margin_a"], 4), row["evaluation_cpu_seconds"]))


def fixed_margin(reachable: float, step: float = 0.005) -> float:
    """The margin the method fixes: the reachable one rounded up to a multiple of `step`."""
    return round(math.ceil(reachable / step - 1e-9) * step, 10)


def measured_costs(pilot: dict, training_pilot: dict | None, old_seconds: dict) -> dict:
    chosen = next(row for row in pilot["candidates"] if row["name"] == pilot["chosen"])
    per_sample = chosen["cpu_seconds"] / (chosen["prompts"] * chosen["samples_per_prompt"])
    if training_pilot is not None:
        grpo = training_pilot["train_cpu_seconds_per_step"]
        source = "training pilot (GRPOTrainer on the chosen task)"
    else:
        grpo = old_seconds["grpo"]
        source = "old runs (GRPOTrainer on the old task): no training pilot yet"
    extra = {arm: old_seconds[old] - old_seconds["grpo"] for arm, old in (("dapo", "dapo"),
                                                                           ("defaults", "dapo_skip_carry"))}
    return {"evaluation_cpu_seconds_per_sample": per_sample, "grpo_step_source": source,
            "step_cpu_seconds": {"grpo": grpo, "dapo": grpo + extra["dapo"], "defaults": grpo + extra["defaults"]},
            "old_step_cpu_seconds": old_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-results", default=OLD_RESULTS)
    parser.add_argument("--pilot", default=os.path.join(RESULTS, "pilot.json"))
    parser.add_argument("--training-pilot", default=os.path.join(RESULTS, "training_pilot.json"))
    parser.add_argument("--budget-hours", type=float, default=12.0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--output", default=os.path.join(RESULTS, "power.json"))
    args = parser.parse_args()

    runs = load_old_runs(args.old_results)
    with open(args.pilot, encoding="utf-8") as handle:
        pilot = json.load(handle)
    training_pilot = None
    if os.path.isfile(args.training_pilot):
        with open(args.training_pilot, encoding="utf-8") as handle:
            training_pilot = json.load(handle)
    spread = old_spread(runs)
    generation = old_generation_spread(runs)
    chosen = next(row for row in pilot["candidates"] if row["name"] == pilot["chosen"])
    q_base = q_from_per_prompt(chosen["per_prompt"], chosen["samples_per_prompt"])
    q_old = statistics.fmean(old_q(run, i) for run in runs.values() for i in range(1, len(run["eval_steps"])))
    # The task starts unsaturated and moves toward p = 0.5 as it learns: plan on the larger of the two.
    q = max(q_base, q_old)
    costs = measured_costs(pilot, training_pilot, old_step_seconds(runs))
    budget = args.budget_hours * 3600
    rows = design_rows(spread, generation, q, costs, budget, args.steps, args.eval_every,
                       prompts_options=(300, 400, 600), samples_options=(1, 2, 4))
    chosen_design = choose_design(rows)
    doubled = design_rows(spread, generation, q, costs, 2 * budget, args.steps, args.eval_every,
                          prompts_options=(chosen_design["prompts"],), samples_options=(chosen_design["samples"],))[0]
    record = {"chosen_design": chosen_design, "margin": fixed_margin(chosen_design["planning"]["margin_a"]),
              "doubled_budget": {"seeds": doubled["seeds"], "margin_a": doubled["planning"]["margin_a"]},
              "old_spread": spread, "generation_per_informative_row": generation, "q_base_chosen_task": q_base,
              "q_old_trained": q_old, "q_planning": q, "costs": costs, "budget_cpu_seconds": budget,
              "steps": args.steps, "eval_every": args.eval_every, "designs": rows}
    with open(args.output, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    with open(os.path.splitext(args.output)[0] + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(record, pilot.get("machine", "")))
    print(markdown(record, pilot.get("machine", "")))


def markdown(record: dict, machine: str) -> str:
    spread, costs = record["old_spread"], record["costs"]
    lines = ["# Real-model study: power calculation", "",
             "Written by `python benchmarks/real_model_study/power.py` before any arm of the study ran. Model and "
             "tests: the script's docstring.", "",
             "## Spread of the paired differences in the 12 old runs (3 seeds, 40 prompts x 4 samples)", "",
             "| comparison | per step (SD by step) | pooled per step | mean over evaluations after step 0 | "
             "at equal tokens | old evaluation variance (x1e-4) | training part: per step / mean / tokens |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, old in spread.items():
        training = old["training_variance"]
        by_step = ", ".join(f"{step}: {sd:.3f}" for step, sd in old["per_step_sd"].items())
        parts = " / ".join(f"{math.sqrt(max(training[key], 0)):.3f}"
                           for key in ("per_step", "mean_over_evaluations", "equal_tokens"))
        lines.append(f"| {name} | {by_step} | {old['pooled_per_step_sd']:.3f} | "
                     f"{old['mean_over_evaluations_sd']:.3f} | {old['equal_tokens_sd']:.3f} "
                     f"(at {old['equal_tokens']} tokens) | {old['old_evaluation_variance'] * 1e4:.2f} | {parts} |")
    generation = record["generation_per_informative_row"]
    lines += ["", "Training part: the SD left after subtracting twice the old evaluation variance (divided by the 4 "
              "evaluations for the mean), 0 where nothing is left. With 3 seeds each SD rests on 2 degrees of "
              "freedom, so the conservative reading below also takes the old runs' whole spread as training part.",
              "", f"(c) generated completions per informative trained row, defaults - DAPO as published: mean "
              f"{generation['difference_mean']:.2f}, SD {generation['difference_sd']:.2f} over seeds.", "",
              f"Sampling noise: q = mean of p (1 - p) over prompts; chosen task at step 0 (pilot) "
              f"{record['q_base_chosen_task']:.3f}, old runs after step 0 {record['q_old_trained']:.3f}; planned "
              f"with {record['q_planning']:.3f}.", "", "## Costs (one torch thread, CPU seconds)", "",
              f"- evaluation: {costs['evaluation_cpu_seconds_per_sample']:.3f} s a sample (pilot, chosen task)",
              f"- optimizer step: " + ", ".join(f"{arm} {seconds:.1f} s" for arm, seconds
                                                 in costs["step_cpu_seconds"].items())
              + f" (GRPOTrainer from the {costs['grpo_step_source']}; the dynamic-sampling arms add the old runs' "
              "extra per step over GRPOTrainer)",
              f"- budget {record['budget_cpu_seconds'] / 3600:.0f} CPU hours; {record['steps']} steps, an "
              f"evaluation every {record['eval_every']}", "",
              "## Designs within the budget (80 % power)", "",
              "| held-out N x k | SE per evaluation | evaluation CPU s | CPU h per seed (3 arms) | seeds affordable | "
              "(a) margin reachable: planning / conservative | seeds for margin 0.03: planning / conservative | "
              "(b) detectable per step, mean over evaluations, at equal tokens (planning) | (c) detectable |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in record["designs"]:
        plan, cons = row["planning"], row["conservative"]
        b = plan["detectable_b"]
        lines.append(f"| {row['prompts']} x {row['samples']} | {row['evaluation_se']:.3f} | "
                     f"{row['evaluation_cpu_seconds']:.0f} | {row['cpu_seconds_per_seed'] / 3600:.2f} | "
                     f"{row['seeds']} | {plan['margin_a']:.3f} / {cons['margin_a']:.3f} | "
                     f"{plan['seeds_for_margin_0.03']} / {cons['seeds_for_margin_0.03']} | "
                     f"{b['per_step']:.3f}, {b['mean_over_evaluations']:.3f}, {b['equal_tokens']:.3f} | "
                     f"{row['detectable_c']:.2f} |")
    chosen = record["chosen_design"]
    lines += ["", f"**Chosen design:** {chosen['prompts']} held-out problems x {chosen['samples']} sample, "
              f"{chosen['seeds']} seeds: margin (a) reachable with 80 % power "
              f"{chosen['planning']['margin_a']:.3f} (conservative spread {chosen['conservative']['margin_a']:.3f}); "
              f"the method fixes **{record['margin']:.3f}**. A margin of 0.03 needs "
              f"{chosen['planning']['seeds_for_margin_0.03']} seeds (conservative "
              f"{chosen['conservative']['seeds_for_margin_0.03']}), "
              f"{chosen['planning']['seeds_for_margin_0.03'] * chosen['cpu_seconds_per_seed'] / 3600:.1f} CPU hours. "
              f"With twice the budget ({2 * record['budget_cpu_seconds'] / 3600:.0f} CPU hours, e.g. 12 wall hours of "
              f"two single-thread runs at a time) {record['doubled_budget']['seeds']} seeds would reach "
              f"{record['doubled_budget']['margin_a']:.3f}.", "", f"Costs measured on: {machine}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
