"""The report's "Limits found after the runs": what a recomputation of the result files showed the design to be,
beside what the method said it would be. Pure functions of the records (`runs`: arm -> seed -> record) and of the
power calculation's planned figures; nothing here changes a comparison or the decision.

- shared training problems: reasoning-gym draws entry i of seed s with `Random(s + i)`, so seed s's problems are
  seed 0's problems s, s + 1, ...; counted from each run's `train_questions`;
- clip-higher inactive: every run had one optimizer step per generation batch; shown by evaluations that are
  identical in every arm;
- realised power: the spread between seeds the runs produced, and the margin or difference it reaches with 80 %
  power, next to the planned ones (`power_formulas`, the calculation the method used);
- truncation: held-out completions that hit the completion limit, per run and evaluation;
- the equal-token comparison: between which evaluations the token budget was interpolated.
"""

import json
import math
import os
import statistics

from . import power_formulas
from . import study_analysis as analysis

POWER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "power.json")
# A held-out evaluation with more truncated completions than this is reported by run; every step-0 share was 0.02.
TRUNCATION_REPORTED = 0.05


def shared_training_problems(runs: dict) -> dict | None:
    """Distinct training problems over all seeds, problems per seed, and the most two seeds share (`None` when a
    record does not list its training problems)."""
    by_seed = {}
    for by_arm_seed in runs.values():
        for seed, record in by_arm_seed.items():
            if "train_questions" not in record:
                return None
            by_seed[seed] = set(record["train_questions"])
    if len(by_seed) < 2:
        return None
    seeds = sorted(by_seed)
    shared = max(len(by_seed[a] & by_seed[b]) for i, a in enumerate(seeds) for b in seeds[i + 1:])
    return {"seeds": len(seeds), "distinct": len(set().union(*by_seed.values())),
            "per_seed": max(len(questions) for questions in by_seed.values()), "most_shared": shared}


def identical_evaluations(runs: dict) -> list[tuple[int, int]]:
    """(seed, step) after step 0 at which every arm of the seed gave the same result on every held-out problem."""
    arms = [arm for arm in runs if runs[arm]]
    found = []
    for seed in analysis.complete_seeds(runs, arms) if len(arms) > 1 else []:
        records = [runs[arm][seed] for arm in arms]
        if any("eval_per_prompt" not in record for record in records):
            return []
        for index, step in enumerate(records[0]["eval_steps"]):
            if step > 0 and len({json.dumps(record["eval_per_prompt"][index]) for record in records}) == 1:
                found.append((seed, step))
    return found


def no_equal_groups_before(record: dict, step: int) -> bool:
    """Whether no group the run generated before `step` had all rewards equal."""
    return all(counts.get("equal_score_groups", 0) == 0 for counts in analysis.probe_steps(record)[:step])


def planned() -> dict:
    """The power calculation's planned spreads and thresholds for the chosen design."""
    with open(POWER_FILE, encoding="utf-8") as handle:
        design = json.load(handle)["chosen_design"]
    sd = design["planning"]["sd"]
    return {"margin": analysis.MARGIN, "sd_a": sd["a: defaults - DAPO as published"]["mean_over_evaluations"],
            "sd_b": sd["b: DAPO as published - GRPOTrainer"]["mean_over_evaluations"],
            "sd_b_tokens": sd["b: DAPO as published - GRPOTrainer"]["equal_tokens"],
            "detect_b": design["planning"]["detectable_b"]["mean_over_evaluations"],
            "detect_b_tokens": design["planning"]["detectable_b"]["equal_tokens"]}


def realised_power(runs: dict, plan: dict) -> list[dict]:
    """Per comparison with at least 2 seeds and some spread: the planned and realised SD between seeds of its
    per-seed difference, the threshold each gives 80 % power (a margin for non-inferiority, a difference for
    detection), and the realised power at the planned threshold."""
    comparisons = [
        ("(a) `defaults` - `dapo`, mean after step 0", "non-inferiority",
         analysis.paired_differences(runs, *analysis.ARMS_OF_A, analysis.mean_after_start), plan["sd_a"],
         plan["margin"]),
        ("fallback `carry_only` - `dapo`, mean after step 0", "non-inferiority",
         analysis.paired_differences(runs, "carry_only", "dapo", analysis.mean_after_start), plan["sd_a"],
         plan["margin"]),
        ("(b) `dapo` - `grpo` at equal steps", "detection",
         analysis.paired_differences(runs, *analysis.ARMS_OF_B, analysis.mean_after_start), plan["sd_b"],
         plan["detect_b"]),
        ("(b) `dapo` - `grpo` at equal tokens", "detection", analysis.equal_token_differences(runs)[1],
         plan["sd_b_tokens"], plan["detect_b_tokens"]),
    ]
    rows = []
    for name, test, differences, planned_sd, planned_threshold in comparisons:
        if len(differences) < 2 or statistics.stdev(differences) < 1e-9:  # no spread: no power to speak of
            continue
        sd, seeds = statistics.stdev(differences), len(differences)
        if test == "non-inferiority":
            threshold = power_formulas.smallest_margin(sd, seeds)
            power = power_formulas.noninferiority_power(planned_threshold, sd, seeds)
        else:
            threshold = power_formulas.smallest_detectable(sd, seeds)
            power = power_formulas.detection_power(planned_threshold, sd, seeds)
        rows.append({"comparison": name, "test": test, "seeds": seeds, "planned_sd": planned_sd, "sd": sd,
                     "planned_threshold": planned_threshold, "threshold": threshold, "power": power})
    return rows


def truncation(runs: dict) -> tuple[list[tuple[str, int, int, float]], float]:
    """Evaluations after step 0 whose truncated share exceeds `TRUNCATION_REPORTED`, as (arm, seed, step, share),
    and the largest share among all the others."""
    above, rest = [], []
    for arm, by_seed in runs.items():
        for seed, record in sorted(by_seed.items()):
            for step, share in zip(record["eval_steps"], record.get("eval_truncated", []), strict=False):
                if step > 0:
                    (above if share > TRUNCATION_REPORTED else rest).append((arm, seed, step, share))
    return above, max((share for *_, share in rest), default=math.nan)


def interpolation_brackets(runs: dict) -> tuple[int | None, dict[str, set[tuple[int, int]]]]:
    """The equal-token budget and, per arm of (b), the pairs of evaluation steps it fell between."""
    budget, _ = analysis.equal_token_differences(runs)
    brackets = {arm: set() for arm in analysis.ARMS_OF_B}
    for seed in analysis.complete_seeds(runs, analysis.ARMS_OF_B) if budget is not None else []:
        for arm in analysis.ARMS_OF_B:
            tokens, steps = runs[arm][seed]["eval_tokens"], runs[arm][seed]["eval_steps"]
            brackets[arm].add(next((steps[i - 1], steps[i]) for i in range(1, len(tokens))
                                   if tokens[i - 1] <= budget <= tokens[i]))
    return budget, brackets


def limits_section(runs: dict) -> str | None:
    """The section's Markdown, each bullet only where the records hold what it needs (`None` when none does)."""
    from benchmarks.shared.output import markdown_table

    bullets, table = [], ""
    shared = shared_training_problems(runs)
    if shared:
        bullets.append(
            f"- **The seeds shared their training problems.** reasoning-gym draws entry i of seed s with `Random(s + i)`, "
            f"so a seed's problems are seed 0's shifted by the seed: the {shared['seeds']} seeds trained on "
            f"{shared['distinct']} distinct problems in all ({shared['per_seed']} each), and two seeds shared up to "
            f"{shared['most_shared']} of them. The method said different seeds train on different problems; the "
            "intervals describe one small pool of problems, not independent draws of a training set.")
    identical = identical_evaluations(runs)
    if identical:
        clean = [(seed, step) for seed, step in identical
                 if all(no_equal_groups_before(runs[arm][seed], step) for arm in runs if seed in runs[arm])]
        shown = ", ".join(f"seed {seed} at step {step}" for seed, step in (clean or identical))
        bullets.append(
            "- **Clip-higher never acted.** Every run made one optimizer step per generation batch (TRL's default "
            "layout: `steps_per_generation` = `gradient_accumulation_steps` = 1, `num_iterations` = 1), so each fresh "
            "row's policy ratio is 1 and `epsilon_high` = 0.28 changes nothing; only carried groups, one optimizer "
            "step old, could reach it. `dapo` here is dynamic sampling alone, not the whole of DAPO as published. "
            f"Every arm gave the same result on every held-out problem in {shown}"
            + (" (no generated group with all rewards equal before it, in any arm, so no arm did anything the "
               "others did not)." if clean else "."))
    above, rest = truncation(runs)
    if above:
        bullets.append(
            "- **An instability.** Held-out completions truncated at the completion limit, above "
            f"{TRUNCATION_REPORTED:.0%} of an evaluation: "
            + "; ".join(f"`{arm}` seed {seed} at step {step}: {share:.0%}" for arm, seed, step, share in above)
            + f". Every other evaluation after step 0 stayed at or below {rest:.1%}. Not investigated in these runs.")
    budget, brackets = interpolation_brackets(runs)
    if budget is not None:
        between = {arm: " or ".join(f"{first} and {last}" for first, last in sorted(pairs))
                   for arm, pairs in brackets.items()}
        bullets.append(
            f"- **(b) at equal tokens was interpolated, not measured.** At {budget} completion tokens each run was read "
            "on a straight line between two evaluations: `dapo` between steps " + between["dapo"]
            + ", `grpo` between steps " + between["grpo"] + ".")
    rows = realised_power(runs, planned())
    if rows:
        below = [row["comparison"] for row in rows if row["power"] < power_formulas.TARGET_POWER]
        bullets.append(
            "- **The realised power was below the plan.** The spread between seeds the runs produced, the margin "
            "(non-inferiority) or difference (detection) it reaches with 80 % power, and the power the runs had at the "
            "planned one. Realised power below 80 %: " + ("; ".join(below) if below else "none") + ". A null result "
            "here means no difference was detected, not that none exists.")
        table = markdown_table(
            ["comparison", "seeds", "SD between seeds, planned", "realised", "80 % power at, planned", "realised",
             "realised power at the planned value"],
            [[row["comparison"], str(row["seeds"]), f"{row['planned_sd']:.3f}", f"{row['sd']:.3f}",
              f"{row['planned_threshold']:.3f}", f"{row['threshold']:.3f}", f"{row['power']:.0%}"] for row in rows])
    if not bullets:
        return None
    return ("## Limits found after the runs\n\nFound when the result files were recomputed after the decision. "
            "The comparisons and the decision above stand as the method fixed them; these say how narrow the "
            "design they rest on was.\n\n" + "\n".join(bullets) + ("\n\n" + table if table else ""))
