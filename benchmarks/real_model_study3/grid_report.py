"""The grid's part of study 3's report: each complete run's figures, the comparisons fixed in advance with their
intervals (labelled interim, and deciding nothing, until every seed is in), the realised spread and power beside
the planned ones, the validity check, generation per informative row, clip-higher acting, truncation, the tokens at
each evaluation and the decision. Everything is computed by analysis.py from the committed result files."""

import glob
import math
import os
import statistics

from benchmarks.real_model.real_model_recorder import read_result
from benchmarks.shared.output import markdown_table
from benchmarks.shared.stats import t_interval

from . import analysis
from .design import ARMS, MARGIN, SEEDS


def load_grid(runs_dir: str) -> dict:
    """arm -> seed -> record, for every complete result file of the grid in `runs_dir`."""
    runs: dict = {}
    for path in sorted(glob.glob(os.path.join(runs_dir, "*-seed*.json"))):
        record = read_result(path)
        if record["complete"]:
            runs.setdefault(record["arm"], {})[record["seed"]] = record
    return runs


def run_rows(runs: dict) -> list[list[str]]:
    rows = []
    for seed in SEEDS:
        for arm in ARMS:
            record = runs.get(arm, {}).get(seed)
            if record is None:
                continue
            labelled = analysis.evaluation_labels(record)
            tokens = " / ".join(f"{e['tokens']:,} (step {e['step']})" for label, e in labelled if "tokens" in label)
            rows.append([f"`{arm}-seed{seed}`", tokens,
                         " / ".join(f"{analysis.score(e):.3f}" for _, e in labelled),
                         " / ".join(f"{analysis.score(e, 'sampled'):.3f}" for _, e in labelled),
                         str(record["max_visits"]),
                         f"{analysis.carried_groups_trained(record, analysis.last_budget_step(record)):.0f}"])
    return rows


def verdict(found: analysis.Comparison) -> str:
    if found.interval.n < 2:
        return "too few seeds"
    if found.test == "non-inferiority":
        return (f"non-inferior at {found.planned_threshold:.3f}" if found.passes()
                else f"non-inferiority at {found.planned_threshold:.3f} not shown")
    if found.passes():
        return "difference"
    return f"no difference detected (80 % power at {found.realised_threshold():.3f})"


def comparison_rows(runs: dict, plan: dict) -> list[list[str]]:
    greedy, sampled = analysis.comparisons(runs, plan, "greedy"), analysis.comparisons(runs, plan, "sampled")
    rows = [[found.name, str(found.interval.n), found.interval.text(), verdict(found), sampled[key].interval.text()]
            for key, found in greedy.items()]
    budgets = next(iter(next(iter(runs.values())).values()))["settings"]["token_budgets"] if runs else []
    for budget in budgets:
        alone = [t_interval(analysis.paired_differences(runs, "defaults", "grpo", analysis.at_budget(budget, measure)))
                 for measure in analysis.MEASURES]
        rows.append([f"(1) at {budget:,} tokens alone (not deciding)", str(alone[0].n), alone[0].text(), "-",
                     alone[1].text()])
    for found in analysis.generation_comparisons(runs, plan).values():
        rows.append([f"{found.name}, completions per informative row", str(found.interval.n),
                     found.interval.text(2), verdict(found), "-"])
    return rows


def power_rows(runs: dict, plan: dict) -> list[list[str]]:
    found = {**analysis.comparisons(runs, plan), **analysis.generation_comparisons(runs, plan)}
    rows = []
    for item in found.values():
        kind = "margin" if item.test == "non-inferiority" else "difference"
        planned_sd = "-" if math.isnan(item.planned_sd) else f"{item.planned_sd:.4f}"
        planned = "-" if math.isnan(item.planned_threshold) else f"{item.planned_threshold:.3f}"
        realised = item.realised_threshold()
        power = item.realised_power()
        rows.append([item.name, str(len(item.differences)), planned_sd,
                     "n/a" if math.isnan(item.realised_sd) else f"{item.realised_sd:.4f}",
                     f"{kind} {planned}", "n/a" if math.isnan(realised) else f"{realised:.3f}",
                     "n/a" if math.isnan(power) else f"{power:.0%}"])
    return rows


def generation_rows(runs: dict) -> list[list[str]]:
    rows = []
    for arm in ARMS:
        records = [runs[arm][seed] for seed in analysis.complete_seeds(runs, (arm,))]
        values = [analysis.generation_per_informative_row(record) for record in records]
        untrained = [analysis.informative_untrained(record) for record in records]
        rows.append([f"`{arm}`", str(len(values)), t_interval(values).text(2),
                     f"{sum(untrained):.0f}" if untrained else "-"])
    return rows


def clip_rows(runs: dict) -> list[list[str]]:
    per_arm = {arm: {(first, last): (value, count) for first, last, value, count in analysis.clip_by_batch(runs, arm)}
               for arm in ARMS}
    low = {arm: {(first, last): value for first, last, value, _ in
                 analysis.clip_by_batch(runs, arm, "clip_ratio/low_mean")} for arm in ARMS}
    batches = sorted({batch for table in per_arm.values() for batch in table})
    rows = []
    for batch in batches:
        cells = []
        for arm in ARMS:
            if batch in per_arm[arm]:
                value, count = per_arm[arm][batch]
                cells.append(f"{value:.4f} / {low[arm][batch]:.4f} ({count})")
            else:
                cells.append("-")
        rows.append([f"{batch[0]}-{batch[1]}", *cells])
    return rows


def carried_ratio_line(runs: dict) -> str:
    mean, largest, steps = analysis.carried_ratio(runs, "defaults")
    if not steps:
        return "Carried rows' policy ratio (`defaults`): no optimizer step of a complete run trained a carried row."
    return (f"Carried rows' per-token policy ratio (`defaults`), over the {steps} optimizer steps of complete runs "
            f"that trained carried rows: mean of the steps' means {mean:.4f}, largest value {largest:.4f}.")


def truncation_rows(runs: dict) -> list[list[str]]:
    rows = []
    for arm in ARMS:
        for label, shares in analysis.truncation(runs, arm).items():
            rows.append([f"`{arm}`", label, *(f"{statistics.fmean(shares[m]):.3f} (max {max(shares[m]):.3f})"
                                              for m in analysis.MEASURES)])
    return rows


def token_rows(runs: dict) -> list[list[str]]:
    rows = []
    for arm in ARMS:
        seeds = analysis.complete_seeds(runs, (arm,))
        if not seeds:
            continue
        labels = [label for label, _ in analysis.evaluation_labels(runs[arm][seeds[0]])]
        for label in labels:
            points = [dict(analysis.evaluation_labels(runs[arm][seed]))[label] for seed in seeds]
            tokens = [p["tokens"] for p in points]
            steps = [p["step"] for p in points]
            rows.append([f"`{arm}`", label, f"{statistics.fmean(tokens):,.0f} ({min(tokens):,}-{max(tokens):,})",
                         f"{min(steps)}-{max(steps)}" if min(steps) != max(steps) else str(steps[0])])
    return rows


def grid_section(runs_dir: str, plan: dict, step0: dict | None) -> str:
    """The section, from the complete runs in `runs_dir`, the plan (plan.json) and the shared step-0 evaluation
    (None before it is measured: the validity check and the decision need it)."""
    runs = load_grid(runs_dir)
    complete = analysis.complete_seeds(runs, tuple(ARMS))
    done = sum(len(seeds) for seeds in runs.values())
    lines = ["## Grid", "", f"Complete runs: {done} of {len(ARMS) * len(SEEDS)}; seeds with all three arms: "
             f"{', '.join(map(str, complete)) or 'none'}.", ""]
    if not runs:
        return "\n".join(lines)
    interim = len(complete) < len(SEEDS)
    lines += ["### Runs", "",
              "Each evaluation: the token budgets in order, then the fixed step. Tokens: the generation-batch "
              "boundary's count, never above its budget.", "",
              markdown_table(["run", "tokens at each budget (step)", "greedy accuracy", "sampled pass rate",
                              "most visits of a problem", "carried groups trained by the last budget"],
                             run_rows(runs)), ""]
    heading = "### Comparisons fixed in advance" + (
        f" (interim: {len(complete)} of {len(SEEDS)} seeds; nothing is decided)" if interim else "")
    lines += [heading, "",
              "Paired (same-seed) differences, mean and two-sided 95 % Student-t interval over seeds; greedy accuracy "
              f"decides, the sampled pass rate is beside it; (4) in generated completions. (1)'s margin: "
              f"{MARGIN:.3f}.", "",
              markdown_table(["comparison", "seeds", "greedy accuracy", "result", "sampled pass rate"],
                             comparison_rows(runs, plan)), "",
              "### Realised spread and power", "",
              "SD between seeds of each comparison's paired differences, and the margin or difference it reaches "
              "with 80 % power at the seeds in, beside the planned ones "
              "([plan.md](plan.md)); power: at the planned margin or difference with the realised SD.", "",
              markdown_table(["comparison", "seeds", "planned SD", "realised SD", "planned", "reached, realised",
                              "power at the planned one"], power_rows(runs, plan)), ""]
    if step0 is not None:
        interval, valid = analysis.validity(runs, step0)
        lines += ["### Validity", "",
                  f"`grpo`'s greedy gain at the last budget over step 0 ({step0['greedy']['pass_rate']:.3f}): "
                  f"{interval.text()} over {interval.n} seeds; required: the lower end at least "
                  f"{analysis.VALIDITY_GAIN:.2f}: "
                  + ("too few seeds." if interval.n < 2 else ("holds." if valid else "**fails**.")), ""]
    lines += ["### Generated completions per informative trained row (4)", "",
              "Every completion the batches generated before the last budget's evaluation (all rounds, dropped and "
              "carried groups included), over the rows those batches trained with a nonzero advantage; paired "
              "differences in the comparisons above. An informative group generated before that boundary and not "
              "trained by it was dropped as surplus (`dapo`) or carried past it (`defaults`).", "",
              markdown_table(["arm", "runs", "mean [95 % interval]",
                              "informative groups generated, not trained by then (all runs)"],
                             generation_rows(runs)), "",
              "### Clip-higher acting", "",
              "`clip_ratio/high_mean` / `clip_ratio/low_mean` per generation batch (its steps): each run's mean over "
              "the batch's steps, averaged over the runs that trained it (their number in brackets).", "",
              markdown_table(["steps", *(f"`{arm}`" for arm in ARMS)], clip_rows(runs)), "",
              carried_ratio_line(runs), "",
              "### Truncated at the limit", "",
              f"Share of held-out completions that hit the length limit, mean over runs (max); the instability rule "
              f"acts above {analysis.INSTABILITY_LIMIT:.0%}.", "",
              markdown_table(["arm", "evaluation", "greedy", "sampled"], truncation_rows(runs)), "",
              "### Tokens at each evaluation", "",
              "Generated completion tokens at the boundary each evaluation read, mean (min-max) over runs; the "
              "undershoot below a budget is at most one generation batch.", "",
              markdown_table(["arm", "evaluation", "tokens", "step"], token_rows(runs)), ""]
    unstable = analysis.unstable_runs(runs)
    if unstable:
        lines += ["Above the instability limit: " + ", ".join(
            f"`{arm}-seed{seed}` {label} {measure} {share:.3f}" for arm, seed, label, measure, share in unstable)
            + ".", ""]
    if step0 is not None:
        decision = analysis.decide(runs, step0, plan, SEEDS)
        lines += ["### Decision", "", *(f"- {analysis.DECISIONS[key]}." for key in decision), ""]
    return "\n".join(lines)
