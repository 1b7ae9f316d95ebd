"""A study's report from its result files: every complete run's readings, the comparisons with their intervals, each
row labelled with its arms, reading and status (interim until every seed is in), the realised spread and power, and
the tokens at which each arm was read on each side of each budget."""

import glob
import math
import os
import statistics

from benchmarks.shared.output import markdown_table

from . import analysis
from .recorder import read_result


def load_grid(runs_dir: str) -> dict:
    """arm -> seed -> record, for every complete result file in `runs_dir`."""
    runs: dict = {}
    for path in sorted(glob.glob(os.path.join(runs_dir, "*-seed*.json"))):
        record = read_result(path)
        if record["complete"]:
            runs.setdefault(record["arm"], {})[record["seed"]] = record
    return runs


def study_runs(study, runs_dir: str) -> dict:
    """arm -> seed -> record: the complete runs in `runs_dir`, an arm's replaced by those of the folder
    `study.reused_runs` names for it."""
    runs = load_grid(runs_dir)
    for arm, folder in study.reused_runs:
        runs[arm] = load_grid(folder).get(arm, {})
    return {arm: seeds for arm, seeds in runs.items() if seeds}


def one_machine(runs: dict, aliases: tuple = ()) -> tuple[dict, list[str]]:
    """The runs printed by the machine description (CPU, kernels, torch) that printed the most of them, and the names
    of the runs left out: another machine takes another floating-point trajectory for the same seed, so a paired
    comparison pairs runs of one machine only. `aliases`' (machine, counted as) pairs count the first description as
    the second. Ties go to the description first in sorted order."""
    counted_as = dict(aliases)

    def key(record) -> str:
        return counted_as.get(record["machine"], record["machine"])

    counts: dict = {}
    for seeds in runs.values():
        for record in seeds.values():
            counts[key(record)] = counts.get(key(record), 0) + 1
    if len(counts) <= 1:
        return runs, []
    kept_machine = min(counts, key=lambda machine: (-counts[machine], machine))
    kept = {arm: {seed: record for seed, record in seeds.items() if key(record) == kept_machine}
            for arm, seeds in runs.items()}  # fmt: skip
    left_out = [f"{arm}-seed{seed} ({record['machine']})" for arm, seeds in sorted(runs.items())
                for seed, record in sorted(seeds.items()) if key(record) != kept_machine]  # fmt: skip
    return {arm: seeds for arm, seeds in kept.items() if seeds}, left_out


def score_text(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"  # NaN: the reading did not measure it


def run_rows(study, runs: dict) -> list[list[str]]:
    rows = []
    for seed in study.seeds:
        for arm in study.arms:
            record = runs.get(arm, {}).get(seed)
            if record is None:
                continue
            budgets = record["settings"]["token_budgets"]
            sides = [analysis.readings(record, budget) for budget in budgets]
            read = " / ".join(f"{below['tokens']:,}-{'' if above is None else format(above['tokens'], ',')}"
                              for below, above in sides)
            scores = [score_text(analysis.at_budget(budget, measure)(record)) for budget in budgets
                      for measure in analysis.MEASURES]
            fixed = [score_text(analysis.at_fixed_step(measure)(record)) for measure in analysis.MEASURES] \
                if record["settings"]["fixed_step"] else ["-", "-"]
            rows.append([f"`{arm}-seed{seed}`", read, " / ".join(scores), " / ".join(fixed), str(record["max_visits"])])
    return rows


def recorded_settings(runs: dict) -> dict:
    """The settings the runs recorded (every run of a study records the same)."""
    return next(record["settings"] for seeds in runs.values() for record in seeds.values())


def comparison_specs(study, budgets) -> list:
    """Every row of the comparisons table: each comparison, then for a mean over budgets its reading at each budget."""
    return [row for spec in study.comparisons for row in (spec, *spec.per_budget(budgets))]


def sampled_text(runs: dict, spec, settings: dict) -> str:
    """The sampled pass rate's interval: at matched tokens over the budgets that measured it (named when they are
    not all of a mean's), after the fixed step, and at matched updates only where every reading measured it; else
    "-"."""
    sampled_budgets = settings.get("sampled_budgets")
    if spec.at == "generation" or (spec.at == "updates" and sampled_budgets is not None):
        return "-"
    interval = analysis.compare(runs, spec, "sampled").interval
    if interval.n == 0:
        return "-"
    measured = analysis.budgets_measured(settings, "sampled")
    if spec.at == "tokens" and spec.budget is None and measured != list(settings["token_budgets"]):
        return f"{interval.text()} ({spec.reading(measured)})"
    return interval.text()


def comparison_rows(study, runs: dict) -> list[list[str]]:
    settings = recorded_settings(runs)
    rows = []
    for spec in comparison_specs(study, settings["token_budgets"]):
        greedy = analysis.compare(runs, spec, "greedy")
        sd, power, reached = greedy.realised_sd, greedy.realised_power(), greedy.realised_threshold()
        reading = spec.reading(settings["token_budgets"], settings["fixed_step"])
        above = sum(difference > 0 for difference in greedy.differences)
        rows.append([spec.name, spec.arms_text(), reading, spec.status, str(greedy.interval.n),
                     greedy.interval.text(2 if spec.at == "generation" else 3), str(above), greedy.verdict(),
                     sampled_text(runs, spec, settings), "n/a" if math.isnan(sd) else f"{sd:.4f}",
                     "n/a" if math.isnan(reached) else f"{reached:.3f}", "n/a" if math.isnan(power) else f"{power:.0%}"])
    return rows


def token_rows(study, runs: dict) -> list[list[str]]:
    rows = []
    for arm in study.arms:
        records = [runs[arm][seed] for seed in analysis.complete_seeds(runs, (arm,))]
        for budget in records[0]["settings"]["token_budgets"] if records else ():
            pairs = [analysis.readings(record, budget) for record in records]
            below = [b["tokens"] for b, _ in pairs]
            above = [a["tokens"] for _, a in pairs if a is not None]
            rows.append([f"`{arm}`", f"{budget:,}", f"{statistics.fmean(below):,.0f} ({min(below):,}-{max(below):,})",
                         f"{statistics.fmean(above):,.0f} ({min(above):,}-{max(above):,})" if above else "-"])
    return rows


CLIP_RATIOS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


def arm_rows(study, runs: dict) -> list[list[str]]:
    """Per arm, means over its complete runs: optimizer updates at each budget, completions generated per
    informative trained row, TRL's clip ratios over the logged steps, and the highest truncated share of any
    evaluation of any run."""
    rows = []
    for arm in study.arms:
        records = [runs[arm][seed] for seed in analysis.complete_seeds(runs, (arm,))]
        if not records:
            continue
        budgets = records[0]["settings"]["token_budgets"]
        updates = [statistics.fmean(analysis.updates_at(budget)(record) for record in records) for budget in budgets]
        clips = [statistics.fmean(analysis.logged_mean(key)(record) for record in records) for key in CLIP_RATIOS]
        rows.append([f"`{arm}`", str(len(records)), " / ".join(f"{value:.1f}" for value in updates),
                     f"{statistics.fmean(analysis.generation_per_informative_row(r) for r in records):.2f}",
                     " / ".join("-" if math.isnan(value) else f"{value:.4f}" for value in clips),
                     f"{max(analysis.highest_truncation(record) for record in records):.1%}"])
    return rows


def target_rows(study, runs: dict, step0_score: float, found: dict) -> list[list[str]]:
    """Per (arm, reference) pair: its seeds, the median ratio and the reference's gain from `found`
    (`analysis.target_endpoints`), and each seed's ratio."""
    budget = study.settings.token_budgets[-1]
    rows = []
    for arm, reference in study.tokens_to_target:
        ratios = analysis.tokens_ratios(runs, arm, reference, step0_score, budget)
        rows.append([f"`{arm}` to `{reference}`", str(len(ratios)), found[analysis.tokens_key(arm, reference)].text(),
                     ", ".join("never" if math.isinf(ratio) else f"{ratio:.2f}" for ratio in ratios),
                     found[analysis.gain_key(reference)].text()])
    return rows


def report(study, runs_dir: str) -> str:
    """The report's Markdown, from the complete runs in `runs_dir` and the step-0 evaluation beside them."""
    runs, left_out = one_machine(study_runs(study, runs_dir), study.machine_aliases)
    complete = analysis.complete_seeds(runs, tuple(study.arms))
    step0 = read_result(os.path.join(runs_dir, "step0.json"))
    done = sum(len(seeds) for seeds in runs.values())
    lines = [f"# {study.name}: report", "",
             f"Complete runs: {done} of {len(study.arms) * len(study.seeds)}; seeds with every arm: "
             f"{', '.join(map(str, complete)) or 'none'}.", ""]
    if left_out:
        lines += [f"Left out, printed by another machine than the runs compared: {', '.join(left_out)}.", ""]
    if step0 is not None:
        lines += [f"Step 0: greedy accuracy {step0['greedy']['pass_rate']:.3f}, sampled pass rate "
                  f"{step0['sampled']['pass_rate']:.3f} on {step0['greedy']['prompts']} held-out problems.", ""]
    if not runs:
        return "\n".join(lines)
    machines = sorted({record["machine"] for seeds in runs.values() for record in seeds.values()})
    interim = len(complete) < len(study.seeds)
    lines += ["## Runs", "",
              "Each budget is read on both sides (the generation-batch boundaries below and above it) and the score "
              "at the budget is interpolated linearly in tokens; per budget greedy / sampled (- where the readings did "
              "not measure it), then the fixed step.",
              "", markdown_table(["run", "tokens read at each budget", "at each budget", "fixed step",
                                  "most visits of a problem"], run_rows(study, runs)), "",
              "## Comparisons" + (f" (interim: {len(complete)} of {len(study.seeds)} seeds; nothing is decided)"
                                  if interim else ""), "",
              "Paired (same-seed) differences, mean and two-sided 95 % Student-t interval over seeds; each row names "
              "its arms, where it reads them (a mean over budgets, one budget, a number of optimizer updates "
              "interpolated in updates between the readings, the fixed step, or completions per informative row) and "
              f"its status: {analysis.FIXED} (the method's; only these decide), exploratory or post hoc (read after "
              "the runs; they decide nothing). A mean over budgets is followed by its reading at each budget, tested "
              "for detection only. Then the seeds whose difference is above 0, the realised SD, the margin or difference it reaches with 80 % power, and the "
              "power at the planned one; the sampled pass rate over the budgets that measured it (- where none did).",
              "", markdown_table(["comparison", "arms", "reading", "status", "seeds", "greedy accuracy", "seeds above 0", "result",
                                  "sampled pass rate", "realised SD", "80 % power at", "power at the planned"],
                                 comparison_rows(study, runs)), "",
              "## Per arm", "",
              "Means over each arm's complete runs: optimizer updates made by each budget (interpolated in tokens), "
              "completions generated per informative trained row, TRL's clip ratios low / high / region over the "
              "logged steps, and the highest share of held-out completions truncated at any evaluation of any run.",
              "", markdown_table(["arm", "runs", "updates by each budget", "completions per informative row",
                                  "clip ratios", "most truncated"], arm_rows(study, runs)), "",
              "## Tokens at each reading", "",
              "Generated completion tokens at the boundary read below and above each budget, mean (min-max).", "",
              markdown_table(["arm", "budget", "below", "above"], token_rows(study, runs)), "",
              f"Machine: {'; '.join(machines)}"
              + "".join(f"; runs printed by {machine} are paired as {alias}'s, whose runs it reproduced exactly"
                        for machine, alias in study.machine_aliases) + ".", ""]
    budget = study.settings.token_budgets[-1]
    targets = {}
    if study.tokens_to_target and step0 is not None:
        targets = analysis.target_endpoints(runs, study.tokens_to_target, step0["greedy"]["pass_rate"], budget)
        rows = target_rows(study, runs, step0["greedy"]["pass_rate"], targets)
        lines += [f"## Tokens to reach the reference's greedy accuracy at {budget:,} tokens", "",
                  f"Per seed, the fewest tokens at which the arm's piecewise-linear curve through its readings (step 0 "
                  f"at 0 tokens) reaches the reference's accuracy interpolated at {budget:,} tokens, over {budget:,} "
                  "(never: not by the arm's last reading); the median with its 95 % percentile bootstrap interval "
                  f"({analysis.BOOTSTRAP_RESAMPLES:,} resamples of the seeds, generator seed 0), and the reference's "
                  "gain over step 0 there (t-interval).", "",
                  markdown_table(["arm to reference", "seeds", "median ratio", "each seed's ratio",
                                  "reference's gain over step 0"], rows), ""]
    if study.decide is not None and not interim:
        found = {spec.name: analysis.compare(runs, spec) for spec in study.comparisons if spec.status == analysis.FIXED}
        if study.tokens_to_target:
            if step0 is None:
                raise ValueError(f"report: {runs_dir} has no step0.json; the decision needs step 0's accuracy.")
            found |= targets
        lines += ["## Decision", "", *(f"- {line}" for line in study.decide(found)), ""]
    return "\n".join(lines)
