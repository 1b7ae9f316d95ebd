"""The study's report: tables, a plot and the decision, from the committed result files alone.

    python -m benchmarks.real_model_study.study report [--output docs/results/real_model_study.md]

Pure arithmetic on `results/runs/*.json` (`study_analysis`), so any machine prints the same text. No decision is
taken until every seed of `dapo` and `defaults` is complete; until then the report says what is in.
"""

import glob
import json
import math
import os
import re
import statistics

from benchmarks.shared.output import markdown_table
from benchmarks.shared.settings import REPO_ROOT
from benchmarks.shared.stats import t_interval

from . import study_analysis as analysis
from .study_limits import limits_section
from .design import ARMS, RUNS_DIR, SEEDS, STEP0_FILE

_RUN_FILE = re.compile(r"(?P<arm>[a-z_]+)-seed(?P<seed>\d+)\.json")
POWER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "power.json")


def load_runs(runs_dir: str) -> dict:
    """arm -> seed -> record, for every complete result file in `runs_dir`: only complete runs are committed, so
    the report on a checkout is the report on the machine that ran them."""
    runs: dict = {}
    for path in sorted(glob.glob(os.path.join(runs_dir, "*-seed*.json"))):
        match = _RUN_FILE.fullmatch(os.path.basename(path))
        if match:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            if record["complete"]:
                runs.setdefault(match["arm"], {})[int(match["seed"])] = record
    return runs


def detectable() -> dict:
    """The smallest differences the design detects with 80 % power (the method's power calculation)."""
    with open(POWER_FILE, encoding="utf-8") as handle:
        power = json.load(handle)["chosen_design"]
    return {**power["planning"]["detectable_b"], "c": power["detectable_c"]}


def completed(runs: dict, arm: str) -> list[dict]:
    return [record for _, record in sorted(runs.get(arm, {}).items())]


def status_table(runs: dict) -> str:
    rows = []
    for arm in ARMS:
        if arm in runs:
            resumed = sum(len(record.get("attempts", [])) > 1 for record in runs[arm].values())
            rows.append([f"`{arm}`", f"{len(runs[arm])} of {len(SEEDS)}", ", ".join(map(str, sorted(runs[arm]))),
                         str(resumed)])
    if not rows:
        return "No run is complete yet."
    return markdown_table(["arm", "complete", "seeds", "resumed from a checkpoint"], rows)


def curves_table(runs: dict) -> tuple[list[int], str]:
    arms = [arm for arm in ARMS if completed(runs, arm)]
    steps = completed(runs, arms[0])[0]["eval_steps"]
    rows = [[f"`{arm}`", str(len(completed(runs, arm)))]
            + [t_interval(analysis.accuracy_at(record, step) for record in completed(runs, arm)).text(3)
               for step in steps] for arm in arms]
    return steps, markdown_table(["arm", "seeds", *(f"step {step}" for step in steps)], rows)


def interim(runs: dict, arms) -> bool:
    """Whether a comparison of `arms` is still interim: some seed lacks a complete run of one of them. (a), the
    validity check and the decision (`study_analysis.decide`) wait for `dapo` and `defaults`; (b) for `dapo` and
    `grpo`."""
    return len(analysis.complete_seeds(runs, arms)) < len(SEEDS)


def interim_note(n: int) -> str:
    return f"(interim: {n} of {len(SEEDS)} seeds; judged only when every seed is in)"


def per_step_line(differences: dict) -> str:
    return ("  Per step (reported, not deciding): "
            + "; ".join(f"step {step} {value.text(3)}" for step, value in differences.items()) + ".")


def comparison_a(runs: dict, interim: bool) -> list[str]:
    interval, non_inferior = analysis.non_inferiority(runs)
    if interval.n < 2:
        return [f"- (a) `defaults` - `dapo`: pending ({interval.n} seed{'s' * (interval.n != 1)} with both complete)."]
    per_step = analysis.per_step_differences(runs, *analysis.ARMS_OF_A)
    lines = [f"- (a) `defaults` - `dapo`, mean over the evaluations after step 0: {interval.text(3)} over "
             f"{interval.n} seeds; margin -{analysis.MARGIN}: lower end "
             + (f"{interval.low:.3f} {interim_note(interval.n)}." if interim else
                # Four decimals once decided: a lower end that misses the margin by less than 0.001 must show it.
                f"{interval.low:.4f}, above it, **non-inferior**." if non_inferior else
                f"{interval.low:.4f}, not above it, **non-inferiority not shown**.")]
    lines.append(per_step_line(per_step))
    return lines


def comparison_b(runs: dict, detect: dict, interim: bool) -> list[str]:
    steps = analysis.paired(runs, *analysis.ARMS_OF_B, analysis.mean_after_start)
    budget, at_tokens = analysis.equal_tokens(runs)

    if steps.n < 2:
        return [f"- (b) `dapo` - `grpo`: pending ({steps.n} seed{'s' * (steps.n != 1)} with both complete)."]

    def verdict(interval, smallest):
        if interim:
            return " " + interim_note(interval.n)
        if interval.excludes_zero():
            return ", a difference (the interval excludes 0)"
        return (f", a null result: no difference detected; the design was planned to detect {smallest:.3f} with 80 % "
                "power (the realised power is under the limits below)")

    return [f"- (b) `dapo` - `grpo` at equal steps (mean over the evaluations after step 0): {steps.text(3)}"
            f"{verdict(steps, detect['mean_over_evaluations'])}.",
            f"- (b) `dapo` - `grpo` at equal generated tokens ({budget} completion tokens, the fewest any of these runs "
            f"generated by its last step): {at_tokens.text(3)}{verdict(at_tokens, detect['equal_tokens'])}."]


def comparison_c(runs: dict) -> tuple[list[str], str]:
    rows = [[f"`{arm}`", t_interval(analysis.generation_per_informative_row(r) for r in completed(runs, arm)).text(2)]
            for arm in ARMS if completed(runs, arm)]
    lines = []
    for arm, other in (("defaults", "dapo"), ("dapo", "grpo")):
        difference = analysis.paired(runs, arm, other, analysis.generation_per_informative_row)
        if difference.n == 1:
            lines.append(f"- (c) `{arm}` - `{other}`: pending (1 seed with both complete).")
        elif difference.n:
            lines.append(f"- (c) generated completions per informative trained row, `{arm}` - `{other}`: "
                         f"{difference.text(2)} over {difference.n} seeds.")
    return lines, markdown_table(["arm", "generated completions per informative trained row"], rows)


def validity_lines(runs: dict, interim: bool) -> list[str]:
    interval, valid = analysis.validity(runs)
    share, late = analysis.grpo_flattening(runs)
    lines = []
    if late.n:
        lines.append(f"- `grpo`: {share:.0%} of its mean gain by the last step came after step 5; its gain from step 10 "
                     f"to the last step {late.text(3)} (reported, not deciding).")
    if interval.n < 2:
        return [f"- Validity: pending ({interval.n} complete `dapo` run{'s' * (interval.n != 1)}).", *lines]
    return [f"- Validity: `dapo`'s mean gain over step 0 {interval.text(3)}; the method asks its lower end to be at "
            f"least {analysis.VALIDITY_GAIN:.2f}: " + (interim_note(interval.n) + "." if interim else
                                                       "**holds**." if valid else "**fails**."), *lines]


def decision_lines(runs: dict) -> list[str]:
    outcome = analysis.decide(runs, SEEDS)
    if outcome == "pending":
        complete = analysis.complete_seeds(runs, analysis.ARMS_OF_A)
        return [f"- No decision yet: {len(complete)} of {len(SEEDS)} seeds have both `dapo` and `defaults` complete."]
    if outcome == "invalid":
        return ["- The validity check fails: the runs learnt too little to judge (a); skipping and carrying default to "
                "off, with no fallback arm."]
    if outcome == "non_inferior":
        return ["- (a) passes and the validity check holds: skipping and carrying stay on by default."]
    carry = analysis.paired(runs, "carry_only", "dapo", analysis.mean_after_start)
    if outcome == "pending_carry_only":
        return [f"- (a) fails: skipping defaults to off (both outcomes of the fallback turn it off); the `carry_only` "
                f"arm decides carrying, on until then ({carry.n} of {len(SEEDS)} seeds in)."]
    passes = outcome == "carry_only_passes"
    per_step = analysis.per_step_differences(runs, "carry_only", "dapo")
    generation = analysis.paired(runs, "carry_only", "dapo", analysis.generation_per_informative_row)
    return [f"- (a) fails; `carry_only` - `dapo`, the same summary and margin: {carry.text(3)} over {carry.n} seeds, "
            f"lower end {carry.low:.4f}, " + ("above it, **passes**: skipping defaults to off, carrying stays on."
                                              if passes else "not above it, **fails** too: skipping and carrying "
                                              "default to off."),
            per_step_line(per_step),
            f"- (c) generated completions per informative trained row, `carry_only` - `dapo` (reported, not deciding): "
            f"{generation.text(2)} over {generation.n} seeds."]


def activity_table(runs: dict) -> tuple[list[str], str]:
    """How much skipping acted, per stretch, mean over the `defaults` runs; and its share per run."""
    records = completed(runs, "defaults")
    if not records:
        return ["No complete `defaults` run yet."], ""
    activity = [analysis.skipping_activity(record) for record in records]
    header = ["", *(f"steps {first}-{last}" for first, last in (row["steps"] for row in activity[0])), "whole run"]
    rows = []
    for key, label in (("skipped", "prompts skipped"), ("considered", "prompts considered"),
                       ("carried", "groups carried"), ("rounds", "generation rounds")):
        per_stretch = [statistics.fmean(run[i][key] for run in activity) for i in range(len(activity[0]))]
        rows.append([f"{label} (mean over seeds)", *(f"{value:.1f}" for value in per_stretch), f"{sum(per_stretch):.1f}"])
    shares = [analysis.skipped_share(record) for record in records]
    per_problem = [sorted(analysis.groups_per_problem(record).values()) for record in records]
    lines = [f"- Skipping skipped {t_interval(shares).text(3)} of the prompts it considered (per run: "
             + ", ".join(f"{share:.3f}" for share in shares) + ")"
             + ("; under 5 %, so the study cannot tell skipping's effect from none." if max(shares) < 0.05 else "."),
             "- Groups generated per training problem in a `defaults` run (fewest to most, per seed): "
             + "; ".join(f"{min(counts)}-{max(counts)}" for counts in per_problem) + "."]
    return lines, markdown_table(header, rows)


def shares_table(runs: dict) -> str:
    arms = [arm for arm in ARMS if completed(runs, arm)]
    stretches = analysis.stretches(completed(runs, arms[0])[0])
    rows = []
    for arm in arms:
        per_run = [analysis.group_shares(record) for record in completed(runs, arm)]
        rows.append([f"`{arm}`"] + [
            f"{statistics.fmean(run[i]['equal_score_groups'] for run in per_run):.2f} "
            f"({statistics.fmean(run[i]['all_correct'] for run in per_run):.2f} / "
            f"{statistics.fmean(run[i]['all_wrong'] for run in per_run):.2f})" for i in range(len(stretches))])
    return markdown_table(["arm", *(f"steps {first}-{last}" for first, last in stretches)], rows)


def cost_table(runs: dict) -> str:
    rows = []
    for arm in ARMS:
        records = completed(runs, arm)
        if records:
            steps = records[0]["eval_steps"][-1]
            rows.append([f"`{arm}`", t_interval(r["train_cpu_seconds"][-1] / steps for r in records).text(1),
                         t_interval(r["eval_tokens"][-1] for r in records).text(0)])
    return markdown_table(["arm", "training CPU seconds per step", "generated completion tokens in the run"], rows)


def report(runs_dir: str = RUNS_DIR, output: str | None = None) -> str:
    runs = load_runs(runs_dir)
    with open(os.path.join(runs_dir, STEP0_FILE), encoding="utf-8") as handle:
        step0 = json.load(handle)["pass_rate"]
    sections = ["# Real-model study: results\n\nThe comparisons of [the method](real_model_study_method.md), fixed before "
                "any run, on the complete runs committed so far; regenerated by `python -m benchmarks.real_model_study"
                ".study report --output docs/results/real_model_study.md` each time a run is committed.",
                "## Runs\n\n" + status_table(runs),
                f"Step 0, shared by every run: held-out pass rate {step0['pass_rate']:.3f} on {step0['prompts']} problems "
                f"x {step0['samples_per_prompt']} sample."]
    if any(completed(runs, arm) for arm in ARMS):
        sections += results_sections(runs)
    text = "\n\n".join(sections)
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        if any(completed(runs, arm) for arm in ARMS):
            plot(runs, os.path.splitext(output)[0] + ".png")
    return text


def results_sections(runs: dict) -> list[str]:
    detect = detectable()
    interim_a, interim_b = interim(runs, analysis.ARMS_OF_A), interim(runs, analysis.ARMS_OF_B)
    steps, curves = curves_table(runs)
    (c_lines, c_table), (activity_lines, activity) = comparison_c(runs), activity_table(runs)
    return [
        "## Comparisons fixed in advance\n\n" + "\n".join(
            comparison_a(runs, interim_a) + comparison_b(runs, detect, interim_b) + c_lines
            + validity_lines(runs, interim_a)),
        "## Decision\n\n" + "\n".join(decision_lines(runs)),
        "## Held-out pass rate per evaluation (mean over complete seeds [95% t-interval])\n\n" + curves,
        "## Generation per informative trained row\n\n" + c_table,
        "## How much skipping acted (`defaults`)\n\n" + "\n".join(activity_lines) + ("\n\n" + activity if activity else ""),
        "## Equal-score share of generated groups per stretch (all right / all wrong)\n\n" + shares_table(runs),
        "## Cost\n\n" + cost_table(runs),
        *filter(None, [limits_section(runs)]),
        provenance(runs),
    ]


def provenance(runs: dict) -> str:
    records = [record for by_seed in runs.values() for record in by_seed.values()]
    machines = sorted({f"{record['device']}; {record['machine']}" for record in records})
    commits = sorted({attempt["commit"][:7] for record in records for attempt in record.get("attempts", [])}
                     | {record["commit"][:7] for record in records})
    return (f"Measured on: {' / '.join(machines)}; runs from commits {', '.join(commits)}. Written by "
            f"`python -m benchmarks.real_model_study.study report` from `{os.path.relpath(RUNS_DIR, REPO_ROOT)}`.")


def arm_color(arm: str) -> str:
    """An arm keeps its colour in every panel; a difference takes the colour of the arm it measures."""
    return f"C{list(ARMS).index(arm)}"


def plot(runs: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for arm in ARMS:
        records = completed(runs, arm)
        if not records:
            continue
        steps = records[0]["eval_steps"]
        means = [statistics.fmean(analysis.accuracy_at(record, step) for record in records) for step in steps]
        tokens = [statistics.fmean(record["eval_tokens"][i] for record in records) for i in range(len(steps))]
        errors = [t_interval(analysis.accuracy_at(record, step) for record in records) for step in steps]
        half = [0 if math.isnan(e.low) else (e.high - e.low) / 2 for e in errors]
        color = arm_color(arm)
        axes[0].errorbar(steps, means, yerr=half, marker="o", capsize=3, color=color,
                         label=f"{arm} ({len(records)} seeds)")
        axes[1].plot(tokens, means, marker="o", color=color, label=arm)
    pairs = (analysis.ARMS_OF_A, ("carry_only", "dapo"), analysis.ARMS_OF_B)
    for offset, (arm, other) in zip((-0.4, 0.0, 0.4), pairs, strict=True):
        differences = analysis.per_step_differences(runs, arm, other)
        if differences:
            intervals = list(differences.values())
            half = [0 if math.isnan(e.low) else (e.high - e.low) / 2 for e in intervals]
            axes[2].errorbar([step + offset for step in differences], [e.mean for e in intervals], yerr=half,
                             marker="o", linestyle="none", capsize=3, color=arm_color(arm),
                             label=f"{arm} - {other} ({intervals[0].n} seeds)")
    axes[2].axhline(0, color="grey", linewidth=0.8)
    axes[2].axhline(-analysis.MARGIN, color="red", linestyle="--", linewidth=0.8, label="non-inferiority margin")
    axes[0].set_xlabel("optimizer step")
    axes[1].set_xlabel("generated completion tokens (mean over seeds)")
    axes[2].set_xlabel("optimizer step")
    for axis in axes[:2]:
        axis.set_ylabel("held-out pass rate (300 problems)")
    axes[2].set_ylabel("paired difference per seed, mean [95% interval]")
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
