"""Study 3's report, regenerated from its committed result files by

    python -m benchmarks.real_model_study3.study report > benchmarks/real_model_study3/results/report.md

Here: the pilot's section (per arm the CPU seconds per generated token in the study's layout, the cost of a greedy
and a sampled evaluation, the clip ratios, the truncated shares, the policy ratio of carried rows and the most
visits of a training problem; and the pilot's three rules, method "Pilot", evaluated on them; no comparison is read
from the pilot) and the shared step 0. The grid's section, with the comparisons: grid_report.py.
"""

import glob
import math
import os
import statistics

from benchmarks.real_model.real_model_recorder import read_result
from benchmarks.shared.output import markdown_table

from .design import (ARMS, PILOT_CPU_HOURS_LIMIT, PILOT_FALLBACK, PILOT_TRUNCATION_LIMIT, RESULTS_DIR, SEEDS,
                     STEP0_FILE, Settings)
from .grid_report import grid_section

CLIP_KEYS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")
SEEDS_PLANNED = len(SEEDS)


def load_records(runs_dir: str) -> dict:
    """arm -> record, for every result file in `runs_dir`, complete or not."""
    paths = sorted(glob.glob(os.path.join(runs_dir, "*-seed*.json")))
    return {record["arm"]: record for record in map(read_result, paths)}


def logged_values(record: dict, key: str) -> list[float]:
    """The values `key` was logged with, in step order (steps that did not log it left out)."""
    values = record["logged"].get(key, {})
    return [values[step] for step in sorted(values, key=int)]


def pilot_figures(record: dict) -> dict:
    """One pilot run's figures: at its (only) budget evaluation, the tokens and steps trained, the training CPU
    seconds per generated token, each evaluation's CPU seconds and truncated shares; over its steps, the clip
    ratios and carried rows' policy ratio."""
    point = next(point for point in record["evaluations"] if point["kind"] == "budget")
    clip = {key: logged_values(record, key) for key in CLIP_KEYS}
    carried = logged_values(record, "dynamic_sampling/carried_ratio_mean")
    return {
        "budget": point["budget"], "tokens": point["tokens"], "step": point["step"],
        "train_cpu_seconds": point["train_cpu_seconds"],
        "per_token": point["train_cpu_seconds"] / point["tokens"] if point["tokens"] else math.nan,
        "greedy_cpu_seconds": point["greedy_cpu_seconds"], "sampled_cpu_seconds": point["sampled_cpu_seconds"],
        "greedy": point["greedy"]["pass_rate"], "sampled": point["sampled"]["pass_rate"],
        "greedy_truncated": point["greedy"]["truncated_fraction"],
        "sampled_truncated": point["sampled"]["truncated_fraction"],
        "clip_means": {key: statistics.fmean(values) if values else math.nan for key, values in clip.items()},
        "high_steps_nonzero": sum(value > 0 for value in clip["clip_ratio/high_mean"]),
        "clip_steps": len(clip["clip_ratio/high_mean"]),
        "carried_ratio_mean": statistics.fmean(carried) if carried else None,
        "carried_ratio_max": max(logged_values(record, "dynamic_sampling/carried_ratio_max"), default=None),
        "max_visits": record["max_visits"],
        "load_average": [attempt["load_average"] for attempt in record["attempts"]],
    }  # fmt: skip


def projected_grid_hours(figures: dict, settings: Settings, seeds: int) -> float:
    """CPU hours of the grid at `seeds` seeds from the pilot's measured costs: each arm trained to the last budget
    at its measured CPU seconds per token, a greedy and a sampled evaluation at each budget and the fixed step
    (at the pilot's mean cost of each), and the shared step-0 evaluation once."""
    greedy = statistics.fmean(row["greedy_cpu_seconds"] for row in figures.values())
    sampled = statistics.fmean(row["sampled_cpu_seconds"] for row in figures.values())
    points = len(settings.token_budgets) + (settings.fixed_step is not None)
    per_seed = sum(row["per_token"] * settings.token_budgets[-1] + points * (greedy + sampled)
                   for row in figures.values())
    return (seeds * per_seed + greedy + sampled) / 3600


def pilot_rules(figures: dict) -> list[str]:
    """The pilot's three rules, as the method fixes them, evaluated; a missing arm leaves its rule open. The cost
    rule projects the GRID's settings (both budgets and the fixed step), not the pilot's."""
    settings, lines = Settings(), []
    dapo = figures.get("dapo")
    if dapo is None:
        lines.append("- Clip-higher: open (no complete `dapo` pilot run).")
    elif dapo["high_steps_nonzero"] == 0:
        lines.append(f"- Clip-higher: **`clip_ratio/high_mean` was 0 at every one of `dapo`'s {dapo['clip_steps']} "
                     "logged steps: the layout is wrong; stop and fix it before the grid.**")
    else:
        lines.append(f"- Clip-higher: `clip_ratio/high_mean` was above 0 at {dapo['high_steps_nonzero']} of `dapo`'s "
                     f"{dapo['clip_steps']} logged steps (mean {dapo['clip_means']['clip_ratio/high_mean']:.5f}): it "
                     "acts; the layout stands.")
    if set(figures) != set(ARMS):
        lines.append("- Cost: open (not every arm's pilot run is complete).")
    else:
        hours = projected_grid_hours(figures, settings, SEEDS_PLANNED)
        if hours > PILOT_CPU_HOURS_LIMIT:
            lines.append(f"- Cost: {SEEDS_PLANNED} seeds would take {hours:.1f} CPU hours, above "
                         f"{PILOT_CPU_HOURS_LIMIT}: **the grid runs {PILOT_FALLBACK['seeds']} seeds and the margin "
                         f"of (1) becomes {PILOT_FALLBACK['margin']}** "
                         f"({projected_grid_hours(figures, settings, PILOT_FALLBACK['seeds']):.1f} CPU hours).")
        else:
            lines.append(f"- Cost: {SEEDS_PLANNED} seeds would take {hours:.1f} CPU hours, within "
                         f"{PILOT_CPU_HOURS_LIMIT}: the grid runs {SEEDS_PLANNED} seeds at margin 0.040.")
    over = [f"`{arm}` {name} {row[f'{name}_truncated']:.3f}" for arm, row in figures.items()
            for name in ("greedy", "sampled") if row[f"{name}_truncated"] > PILOT_TRUNCATION_LIMIT]
    if over:
        lines.append(f"- Truncation: **above {PILOT_TRUNCATION_LIMIT:.0%} in {', '.join(over)}: the cause is found "
                     "before the grid.**")
    elif figures:
        lines.append(f"- Truncation: no pilot evaluation truncated more than {PILOT_TRUNCATION_LIMIT:.0%} of its "
                     "completions.")
    return lines


def pilot_section(pilot_dir: str) -> str:
    from .design import PILOT_SETTINGS

    every_record = load_records(pilot_dir)
    records = {arm: record for arm, record in every_record.items() if record["complete"]}
    pending = sorted(set(every_record) - set(records))
    figures = {arm: pilot_figures(records[arm]) for arm in ARMS if arm in records}
    lines = ["## Pilot", "",
             f"One run per arm on the pilot's block of 120 problems (trainer seed 10), to the first budget "
             f"({PILOT_SETTINGS.token_budgets[0]:,} generated completion tokens); no comparison is read from it.", ""]
    if not figures:
        return "\n".join([*lines, "No pilot run is complete yet.", ""])
    lines += [markdown_table(
        ["arm", "steps trained", "tokens at the evaluation", "training CPU s", "CPU s per token",
         "greedy eval CPU s", "sampled eval CPU s", "greedy acc.", "sampled pass", "truncated greedy / sampled",
         "most visits of a problem"],
        [[f"`{arm}`", str(row["step"]), f"{row['tokens']:,}", f"{row['train_cpu_seconds']:.0f}",
          f"{row['per_token']:.4f}", f"{row['greedy_cpu_seconds']:.0f}", f"{row['sampled_cpu_seconds']:.0f}",
          f"{row['greedy']:.3f}", f"{row['sampled']:.3f}",
          f"{row['greedy_truncated']:.3f} / {row['sampled_truncated']:.3f}", str(row["max_visits"])]
         for arm, row in figures.items()]), "",
        markdown_table(
        ["arm", *(f"`{key}` mean" for key in CLIP_KEYS), "steps with high > 0", "carried rows' ratio mean / max"],
        [[f"`{arm}`", *(f"{row['clip_means'][key]:.5f}" for key in CLIP_KEYS),
          f"{row['high_steps_nonzero']} of {row['clip_steps']}",
          "-" if row["carried_ratio_mean"] is None
          else f"{row['carried_ratio_mean']:.4f} / {row['carried_ratio_max']:.4f}"]
         for arm, row in figures.items()]), "",
        "CPU seconds: this process's, one torch thread, evaluations and checkpoint writes excluded from training; "
        "load average at each run's start: "
        + ", ".join(f"`{arm}` {', '.join(f'{load:.1f}' for load in row['load_average'])}"
                    for arm, row in figures.items())
        + f". Machine: {next(iter(records.values()))['machine']}.", "",
        "### The pilot's rules (method, \"Pilot\")", "", *pilot_rules(figures)]
    if pending:
        lines += ["", f"Not complete yet: {', '.join(f'`{arm}`' for arm in pending)}."]
    return "\n".join([*lines, ""])


def report(results_dir: str = RESULTS_DIR) -> str:
    step0_path = os.path.join(results_dir, "runs", STEP0_FILE)
    lines = ["# Real-model study 3: report", "",
             "Regenerated from the committed result files by `python -m benchmarks.real_model_study3.study report`; "
             "method: [docs/results/real_model_study3_method.md](../../../docs/results/real_model_study3_method.md). "
             "No comparison is read until every seed of the compared arms is in.", "",
             pilot_section(os.path.join(results_dir, "pilot"))]
    step0 = read_result(step0_path)
    if step0 is not None:
        lines += ["## Step 0 (shared by every run of the grid)", "",
                  f"Greedy accuracy {step0['greedy']['pass_rate']:.3f} (truncated "
                  f"{step0['greedy']['truncated_fraction']:.3f}, {step0['greedy_cpu_seconds']:.0f} CPU s), sampled "
                  f"pass rate {step0['sampled']['pass_rate']:.3f} (truncated "
                  f"{step0['sampled']['truncated_fraction']:.3f}, "
                  f"{step0['sampled_cpu_seconds']:.0f} CPU s), on {step0['greedy']['prompts']} held-out problems.", ""]
    plan = read_result(os.path.join(results_dir, "plan.json"))
    lines.append(grid_section(os.path.join(results_dir, "runs"), plan, step0))
    return "\n".join(lines)
