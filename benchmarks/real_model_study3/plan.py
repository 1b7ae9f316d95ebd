"""Study 3's power calculation and budget, before any run: from study 2's REALISED spread between seeds (its 32
committed result files) and its measured costs, with study 2's own power formulas.

    python -m benchmarks.real_model_study3.plan [--budget-hours 15]

Writes `results/plan.json` and `results/plan.md`. Pure arithmetic on committed files: no model, no run.

Spread. Study 2's SD between seeds of each paired difference, minus twice its evaluation variance (300 problems x 1
sample, q = 0.119 as its method planned; divided by the number of evaluations averaged), is the training part.
Comparison (1) of study 3 (the defaults against `GRPOTrainer`, mean over the equal-token evaluations) is planned on
study 2's closest comparison, dynamic sampling against `GRPOTrainer` averaged over evaluations: its training part
plus twice study 3's evaluation variance over the evaluations averaged. Conservative reading: study 2's whole
spread at one equal-token point (0.057), not reduced by averaging, since study 3's independent problem draws and
acting clip can only add spread.

Cost. CPU seconds per generated completion token of each arm (the defaults: study 2's `carry_only`, which trained
as they now do) over study 2's steps 1-10 (the regime before its 10
problems became all right or all wrong, which study 3's 120 problems per seed avoid), times the last token budget,
times 1.2 for the old-log-prob forward TRL runs when a generation batch spans several updates (an estimate; the
pilot measures it); plus, per budget and arm, a greedy and a sampled evaluation of the held-out set at study 2's
CPU seconds per sample.
"""

import argparse
import json
import math
import os
import statistics

from benchmarks.real_model_study import power_formulas, study_analysis
from benchmarks.real_model_study.design import RUNS_DIR
from benchmarks.real_model_study.study_limits import planned, realised_power
from benchmarks.real_model_study.study_report import load_runs

from .design import Settings

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
STUDY2_POWER = os.path.join(os.path.dirname(RUNS_DIR), "power.json")
WANTED_MARGIN = 0.04
LAYOUT_OVERHEAD = 1.2
# Per-step comparisons (2) and (3) read every arm at one fixed optimizer step besides the token budgets.
FIXED_STEP_EVALUATIONS = 1
EARLY_STEP = 10
# Study 3's arm -> the study 2 arm that trained the same way (study 3's defaults carry and do not skip).
COST_PROXY = {"grpo": "grpo", "dapo": "dapo", "defaults": "carry_only"}


def training_variance(sd: float, q: float, prompts: int, evaluations: int) -> float:
    """Study 2's spread less twice its evaluation variance over the evaluations averaged (at least 0)."""
    return max(sd**2 - 2 * power_formulas.evaluation_variance(q, prompts, 1) / evaluations, 0.0)


def seconds_per_token(runs: dict, arm: str, step: int = EARLY_STEP) -> float:
    """Training CPU seconds per generated completion token of `arm` up to `step`, over study 2's seeds."""
    records = list(runs[arm].values())
    index = records[0]["eval_steps"].index(step)
    return statistics.fmean(r["train_cpu_seconds"][index] / r["eval_tokens"][index] for r in records)


def seed_cpu_seconds(per_token: dict, last_budget: int, evaluations: int, evaluation_seconds: float) -> float:
    """One seed's three arms: training to the last budget, and a greedy and a sampled evaluation at each of
    `evaluations` points (the token budgets and the fixed step)."""
    training = sum(per_token.values()) * last_budget * LAYOUT_OVERHEAD
    return training + evaluations * len(per_token) * 2 * evaluation_seconds


def designs(spread: dict, q: float, per_token: dict, evaluation_seconds: float, budget_seconds: float) -> list[dict]:
    rows = []
    for last_budget in (8_000, 12_000):
        for budgets in (2, 3, 4):
            per_seed = seed_cpu_seconds(per_token, last_budget, budgets + FIXED_STEP_EVALUATIONS, evaluation_seconds)
            seeds = int((budget_seconds - 2 * evaluation_seconds) // per_seed)  # step 0 is shared
            planning = power_formulas.study_sd(spread["training_mean"], q, 300, 1, budgets)
            conservative = spread["whole_equal_tokens"]
            row = {"last_budget": last_budget, "budgets": budgets, "cpu_hours_per_seed": per_seed / 3600,
                   "seeds": seeds, "sd_planning": planning, "sd_conservative": conservative}
            for reading, sd in (("planning", planning), ("conservative", conservative)):
                row[f"margin_{reading}"] = power_formulas.smallest_margin(sd, seeds) if seeds >= 2 else math.nan
                needed = power_formulas.seeds_needed(WANTED_MARGIN, sd)
                row[f"seeds_for_{WANTED_MARGIN}_{reading}"] = needed
                row[f"cpu_hours_for_{WANTED_MARGIN}_{reading}"] = (needed * per_seed + 2 * evaluation_seconds) / 3600
            rows.append(row)
    return rows


def choose(rows: list[dict], budget_hours: float) -> dict:
    """The cheapest design that reaches `WANTED_MARGIN` on the planning spread within "about" the budget (5 % over
    at most), run at the seeds it needs; otherwise the design with the smallest reachable margin at the seeds the
    budget affords (a tie goes to the longer run, which learns more)."""
    key = f"cpu_hours_for_{WANTED_MARGIN}_planning"
    within = [row for row in rows if row[key] <= 1.05 * budget_hours]
    if within:
        row = min(within, key=lambda row: row[key])
        seeds = row[f"seeds_for_{WANTED_MARGIN}_planning"]
        return {**row, "seeds": seeds, "cpu_hours": row[key],
                "margin_planning": power_formulas.smallest_margin(row["sd_planning"], seeds),
                "margin_conservative": power_formulas.smallest_margin(row["sd_conservative"], seeds)}
    row = min(rows, key=lambda row: (round(row["margin_planning"], 3), -row["last_budget"]))
    return {**row, "cpu_hours": row["seeds"] * row["cpu_hours_per_seed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-hours", type=float, default=15.0)
    args = parser.parse_args()
    with open(STUDY2_POWER, encoding="utf-8") as handle:
        study2 = json.load(handle)
    q, sample_seconds = study2["q_planning"], study2["costs"]["evaluation_cpu_seconds_per_sample"]
    runs = load_runs(RUNS_DIR)
    realised = {row["comparison"]: row for row in realised_power(runs, planned())}
    b_steps, b_tokens = realised["(b) `dapo` - `grpo` at equal steps"], realised["(b) `dapo` - `grpo` at equal tokens"]
    spread = {"training_mean": training_variance(b_steps["sd"], q, 300, 4), "whole_equal_tokens": b_tokens["sd"]}
    per_token = {arm: seconds_per_token(runs, proxy) for arm, proxy in COST_PROXY.items()}
    settings = Settings()
    evaluation_seconds = sample_seconds * settings.held_out_prompts
    rows = designs(spread, q, per_token, evaluation_seconds, args.budget_hours * 3600)
    chosen = choose(rows, args.budget_hours)
    seeds = chosen["seeds"]
    per_step_sd = statistics.fmean(
        statistics.stdev(study_analysis.paired_differences(runs, "dapo", "grpo", lambda r, s=step:
                                                           study_analysis.accuracy_at(r, s))) for step in (5, 10, 15, 20))
    detect = {
        "(2) at equal tokens, mean over budgets": power_formulas.smallest_detectable(chosen["sd_planning"], seeds),
        "(2) and (3) at the fixed step (study 2's mean per-step SD)": power_formulas.smallest_detectable(
            per_step_sd, seeds),
    }
    generation = study_analysis.paired_differences(runs, "defaults", "dapo", study_analysis.generation_per_informative_row)
    record = {"q": q, "evaluation_cpu_seconds": evaluation_seconds, "per_token_cpu_seconds": per_token,
              "realised": realised, "training_sd_mean": math.sqrt(spread["training_mean"]),
              "whole_sd_equal_tokens": spread["whole_equal_tokens"], "designs": rows, "chosen": chosen,
              "detectable_at_chosen_seeds": detect,
              "detectable_generation": power_formulas.smallest_detectable(statistics.stdev(generation), seeds),
              "budget_hours": args.budget_hours}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "plan.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    text = markdown(record)
    with open(os.path.join(RESULTS, "plan.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


def markdown(record: dict) -> str:
    from benchmarks.shared.output import markdown_table

    realised = markdown_table(
        ["study 2 comparison", "seeds", "SD between seeds, realised", "training part", "80 % power at (realised)"],
        [[name, str(row["seeds"]), f"{row['sd']:.4f}",
          f"{math.sqrt(training_variance(row['sd'], record['q'], 300, 1 if 'tokens' in name else 4)):.4f}",
          f"{row['threshold']:.4f}"] for name, row in record["realised"].items()])
    designs_table = markdown_table(
        ["last budget (tokens)", "token budgets", "CPU h per seed (3 arms)", "seeds in budget",
         "SD planning / conservative", "margin reachable, planning / conservative",
         f"seeds for {WANTED_MARGIN}, planning / conservative (CPU h)"],
        [[str(row["last_budget"]), str(row["budgets"]), f"{row['cpu_hours_per_seed']:.2f}", str(row["seeds"]),
          f"{row['sd_planning']:.4f} / {row['sd_conservative']:.4f}",
          f"{row['margin_planning']:.3f} / {row['margin_conservative']:.3f}",
          f"{row[f'seeds_for_{WANTED_MARGIN}_planning']} ({row[f'cpu_hours_for_{WANTED_MARGIN}_planning']:.1f}) / "
          f"{row[f'seeds_for_{WANTED_MARGIN}_conservative']} ({row[f'cpu_hours_for_{WANTED_MARGIN}_conservative']:.1f})"]
         for row in record["designs"]])
    chosen = record["chosen"]
    costs = ", ".join(f"`{arm}` {seconds:.4f}" for arm, seconds in record["per_token_cpu_seconds"].items())
    detect = "; ".join(f"{name}: {value:.3f}" for name, value in record["detectable_at_chosen_seeds"].items())
    return f"""# Study 3: power calculation and budget

Written by `python -m benchmarks.real_model_study3.plan` before any run of study 3, from study 2's committed result
files (`benchmarks/real_model_study/results/runs`). Model and costs: the script's docstring.

## Study 2's realised spread

{realised}

Training part: the SD left after twice study 2's evaluation variance (q = {record['q']:.3f}, 300 x 1, over the 4
evaluations for a mean, 1 at equal tokens). Comparison (1) is planned on the training part of (b) at equal steps,
{record['training_sd_mean']:.4f} (dynamic sampling against `GRPOTrainer`, averaged over evaluations), and
conservatively on the whole SD of (b) at one equal-token point, {record['whole_sd_equal_tokens']:.4f}.

## Designs within {record['budget_hours']:.0f} single-thread CPU hours (80 % power)

Costs: training CPU seconds per generated completion token over study 2's steps 1-{EARLY_STEP} (`defaults`: study
2's `carry_only`): {costs}; times
{LAYOUT_OVERHEAD} for the several-updates layout; an evaluation of 300 problems {record['evaluation_cpu_seconds']:.0f}
CPU s, greedy and sampled at each token budget and at one fixed step.

{designs_table}

**Chosen** (`choose`: the cheapest design reaching {WANTED_MARGIN} on the planning spread within 5 % of the
budget, else the smallest reachable margin): last budget {chosen['last_budget']} tokens, {chosen['budgets']} token
budgets, {chosen['seeds']} seeds ({chosen['cpu_hours_per_seed']:.2f} CPU h a seed, {chosen['cpu_hours']:.1f} in all). Margin of (1) reachable with 80 % power:
{chosen['margin_planning']:.3f} on the planning spread, {chosen['margin_conservative']:.3f} on the conservative one.
A margin of {WANTED_MARGIN} needs {chosen[f'seeds_for_{WANTED_MARGIN}_planning']} seeds on the planning spread
({chosen[f'cpu_hours_for_{WANTED_MARGIN}_planning']:.1f} CPU h) and {chosen[f'seeds_for_{WANTED_MARGIN}_conservative']} on
the conservative one ({chosen[f'cpu_hours_for_{WANTED_MARGIN}_conservative']:.1f} CPU h).

Detectable with 80 % power at {chosen['seeds']} seeds (planning spread, study 3's evaluations): {detect};
generation per informative trained row (defaults - dapo): {record['detectable_generation']:.2f}.
"""


if __name__ == "__main__":
    main()
