"""Power calculation of the real-model study: how many seeds, how large a held-out set, and which non-inferiority
margin the budget reaches, from the spread of the 12 committed runs of the first real-model benchmark and the
costs measured on this machine.

    python -m benchmarks.real_model_study.power [--old-results DIR] [--budget-hours 12]

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
import json
import math
import os
import statistics


from .old_runs import (
    OLD_RESULTS, load_old_runs, old_generation_spread, old_q, old_spread, old_step_seconds,
)
from .power_formulas import (
    evaluation_variance, grid_cpu_seconds, q_from_per_prompt, seeds_needed, smallest_detectable, smallest_margin,
    study_sd,
)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
WANTED_MARGIN = 0.03


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
             "Written by `python -m benchmarks.real_model_study.power` before any arm of the study ran. Model and "
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
              f"the method fixes **{record['margin']:.3f}**. (b) detectable per step, mean over evaluations, at "
              f"equal tokens: " + ", ".join(f"{value:.3f}" for value in chosen["planning"]["detectable_b"].values())
              + " (conservative " + ", ".join(f"{value:.3f}" for value in chosen["conservative"]["detectable_b"].values())
              + f"); (c) {chosen['detectable_c']:.2f} completions per informative row. A margin of 0.03 needs "
              f"{chosen['planning']['seeds_for_margin_0.03']} seeds (conservative "
              f"{chosen['conservative']['seeds_for_margin_0.03']}), "
              f"{chosen['planning']['seeds_for_margin_0.03'] * chosen['cpu_seconds_per_seed'] / 3600:.1f} CPU hours. "
              f"With twice the budget ({2 * record['budget_cpu_seconds'] / 3600:.0f} CPU hours, e.g. 12 wall hours of "
              f"two single-thread runs at a time) {record['doubled_budget']['seeds']} seeds would reach "
              f"{record['doubled_budget']['margin_a']:.3f}.", "", f"Costs measured on: {machine}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
