"""Where regeneration's extra completions per informative trained row come from, read from run files the study
harness wrote (the allocation study's `defaults` and `grpo` runs by default; no model, a few seconds).

For each `defaults` run (dynamic sampling that regenerates, with carrying) up to the last budget's reading below:

- informative groups generated (the harness's probe: groups whose rewards differ), and what became of them: trained
  in the step that generated them, carried and trained in the next, dropped as surplus beyond what carrying keeps,
  or still carried when the run stopped (the last step's tail, not waste);
- the flat share of generated groups, against `GRPOTrainer`'s over the same steps;
- first-round oversizing: groups generated beyond the batch's 8 in steps that needed a single round.

    python -m benchmarks.flat_groups_study.regeneration_waste            # the allocation study's 15 seeds
    python -m benchmarks.flat_groups_study.regeneration_waste --runs_dir DIR --seeds 0 1 2 3
"""

import argparse
import os
import statistics

from benchmarks.study_harness.analysis import readings
from benchmarks.study_harness.recorder import read_result

RUNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "docs", "results",
                    "allocation_study", "runs")


def batches(record: dict) -> list[dict]:
    """Per generation batch up to the last budget's reading below: the probe's counts (keyed by the step that
    generated them) beside the sampler's logged metrics (keyed by the step after)."""
    last = readings(record, record["settings"]["token_budgets"][-1])[0]["step"]
    logged = record["logged"]
    rows = []
    for at, counts in sorted(record["probe"].items(), key=lambda item: int(item[0])):
        if int(at) >= last:
            break
        key = str(int(at) + 1)
        value = {name.split("/", 1)[1]: logged[name].get(key, 0.0) for name in logged if name.startswith("dynamic_")}
        rows.append({"step": int(at), "groups": counts["groups"],
                     "informative": counts["groups"] - counts["equal_score_groups"], **value})
    return rows


def waste(record: dict) -> dict:
    """What became of one regenerating run's informative groups (see the module docstring)."""
    steps = batches(record)
    generated = sum(step["informative"] for step in steps)
    dropped = sum(step.get("dropped_informative_groups", 0.0) for step in steps)
    # `carried_groups` at a batch counts the groups carried into it, all trained there.
    carried_in = sum(step.get("carried_groups", 0.0) for step in steps)
    # Groups still carried when the run stopped: informative, generated and never trained (the tail).
    tail = generated - dropped - sum(step.get("kept_groups", 0.0) for step in steps)
    single_round = [step for step in steps if step.get("rounds") == 1.0]
    return {"informative": generated, "dropped": dropped, "carried_and_trained": carried_in, "tail": tail,
            "flat_share": 1 - generated / sum(step["groups"] for step in steps),
            "oversizing": statistics.fmean(step["groups"] - 8 for step in single_round) if single_round else 0.0,
            "completions": sum(step["groups"] for step in steps) * record["settings"]["num_generations"],
            "trained_rows": sum(step.get("kept_groups", 0.0) for step in steps) * record["settings"]["num_generations"]}


def flat_share(record: dict) -> float:
    steps = batches(record)
    return 1 - sum(step["informative"] for step in steps) / sum(step["groups"] for step in steps)


def command_line(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs_dir", default=os.path.normpath(RUNS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(15)))
    cli = parser.parse_args(argv)
    found = []
    print("| seed | informative groups generated | trained in their step | carried, trained next | dropped | tail | "
          "flat share: defaults / grpo | first-round oversizing (groups) |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in cli.seeds:
        record = read_result(os.path.join(cli.runs_dir, f"defaults-seed{seed}.json"))
        reference = read_result(os.path.join(cli.runs_dir, f"grpo-seed{seed}.json"))
        if record is None or reference is None or not (record["complete"] and reference["complete"]):
            continue
        result = waste(record) | {"grpo_flat_share": flat_share(reference)}
        found.append(result)
        print(f"| {seed} | {result['informative']:.0f} | "
              f"{result['informative'] - result['carried_and_trained'] - result['dropped'] - result['tail']:.0f} | "
              f"{result['carried_and_trained']:.0f} | {result['dropped']:.0f} | {result['tail']:.0f} | "
              f"{result['flat_share']:.3f} / {result['grpo_flat_share']:.3f} | {result['oversizing']:.1f} |")
    if not found:
        print("no complete pair of runs")
        return 1
    informative = sum(result["informative"] for result in found)
    dropped = sum(result["dropped"] for result in found)
    tail = sum(result["tail"] for result in found)
    flat, grpo_flat = (statistics.fmean(result[key] for result in found) for key in ("flat_share", "grpo_flat_share"))
    print(f"\n{len(found)} seeds. Informative groups generated but never trained, the last step's tail excluded: "
          f"{dropped:.0f} of {informative - tail:.0f} ({dropped / (informative - tail):.1%}); the tail: {tail:.0f}.")
    print(f"Flat share of generated groups: defaults {flat:.3f}, grpo {grpo_flat:.3f}; completions per informative "
          f"trained row if none were wasted: defaults {1 / (1 - flat):.2f}, grpo {1 / (1 - grpo_flat):.2f}.")
    as_read = statistics.fmean(result["completions"] / result["trained_rows"] for result in found)
    with_tail = statistics.fmean(result["completions"] / (result["trained_rows"] + 8 * result["tail"])
                                 for result in found)  # fmt: skip
    print(f"Defaults' completions per informative trained row, mean over seeds: {as_read:.2f} as the harness reads "
          f"it (the tail generated but not yet trained at the reading), {with_tail:.2f} counting the tail as trained.")
    return 0


if __name__ == "__main__":
    raise SystemExit(command_line())
