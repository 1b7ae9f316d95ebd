"""What each trainer generates per trained row that carries signal, on datasets of known difficulty.

    python -m benchmarks.dynamic_sampling_cost.generation_cost [--seeds 0 1 2] [--workers 2] [--smoke] [--output PATH]

The policy is the toy task's tiny transformers model and every trainer is the real one (TRL's `GRPOTrainer`, this
package's `DAPOTrainer`); only the environment is synthetic. Each of the 100 prompts has a pass probability, and
the reward marks a completion right (1) with that probability and wrong (0) otherwise, from a generator seeded by
the run's seed: whatever the policy writes, a prompt's difficulty is known by construction. Datasets:

- `mostly degenerate`: 40 % of the prompts always right (pass probability 1), 30 % always wrong (0), 30 % mixed
  (0.5, so a group of 4 is degenerate by chance 1 time in 8);
- `none degenerate`: every prompt mixed (0.5): a group is degenerate only by chance, 1 time in 8;
- `drift`: 40 % always right, 30 % mixed, and 30 % always wrong until step 25, mixed from then on: prompts the
  policy "learns" mid-run, which skipping must find again.

Settings: 16 prompts x 4 completions a step, 50 steps (8 epochs of the dataloader), one optimizer step per
generation batch. The measure, fixed before any arm ran: generated completions (every completion the reward
scored; dynamic sampling's replay does not score again) divided by trained rows whose advantage is non-zero (rows
of TRL's scored batch, counted on the advantages TRL computed). For the drift dataset it also counts the drifting
prompts trained (in a group with non-zero advantages) after step 25.

Arms: `GRPOTrainer`; `DAPOTrainer` as the DAPO paper publishes it (dynamic sampling, surplus dropped, no
skipping); `DAPOTrainer` with the streak skip rule and carrying; `DAPOTrainer` with the posterior skip rule and
carrying. Writes a Markdown report (default docs/results/generation_cost.md) and the raw runs as JSON beside it;
`--replot` rewrites the report from that JSON without training.
"""

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from benchmarks.shared import stats
from benchmarks.shared.output import command_line, markdown_table, write_json
from benchmarks.shared.policy import quiet
from benchmarks.shared.settings import REPO_ROOT, add_seeded_report_arguments, configure_runtime
from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.machine import describe_machine
from trl_variants.toy import build_char_tokenizer, build_tiny_model

DEFAULT_OUTPUT = REPO_ROOT / "docs" / "results" / "generation_cost.md"
NUM_PROMPTS, GROUPS_PER_STEP, NUM_GENERATIONS, STEPS, DRIFT_STEP = 100, 16, 4, 50, 25
DEFAULT_SEEDS = [0, 1, 2]
SMOKE = {"steps": 3, "seeds": [0]}
DATASETS = {
    # name: (share, pass probability before DRIFT_STEP, from DRIFT_STEP on) per kind of prompt
    "mostly degenerate": [(0.4, 1.0, 1.0), (0.3, 0.0, 0.0), (0.3, 0.5, 0.5)],
    "none degenerate": [(1.0, 0.5, 0.5)],
    "drift": [(0.4, 1.0, 1.0), (0.3, 0.5, 0.5), (0.3, 0.0, 0.5)],
}
DS_FIELDS = ("dynamic_sampling", "dynamic_sampling_carry_surplus", "skip_degenerate_prompts", "skip_predictor")
ARMS = {
    "GRPOTrainer": None,
    "DAPOTrainer, paper": {"dynamic_sampling": True, "dynamic_sampling_carry_surplus": False,
                           "skip_degenerate_prompts": False},
    "+ streak skipping + carrying": {"dynamic_sampling": True, "dynamic_sampling_carry_surplus": True,
                                     "skip_degenerate_prompts": True, "skip_predictor": "streak"},
    "+ posterior skipping + carrying": {"dynamic_sampling": True, "dynamic_sampling_carry_surplus": True,
                                        "skip_degenerate_prompts": True, "skip_predictor": "posterior"},
}


def synthetic_dataset(name: str) -> Dataset:
    """100 distinct prompts `a+b=`, each with its pass probability before and after `DRIFT_STEP`."""
    rows, start = [], 0
    for share, before, after in DATASETS[name]:
        count = round(share * NUM_PROMPTS)
        rows += [{"before": before, "after": after, "drifts": before != after} for _ in range(count)]
        start += count
    return Dataset.from_list([{"prompt": f"{i // 10}+{i % 10}=", **row} for i, row in enumerate(rows)])


class PassProbabilityReward:
    """1.0 with the prompt's pass probability at the current step, else 0.0, from a generator seeded by the run."""

    __name__ = "pass_probability_reward"

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.scored = 0

    def __call__(self, prompts, completions, before, after, trainer_state=None, **kwargs):
        step = trainer_state.global_step if trainer_state is not None else 0
        probabilities = np.asarray(after if step >= DRIFT_STEP else before, dtype=np.float64)
        self.scored += len(prompts)
        return (self.rng.random(len(prompts)) < probabilities).astype(np.float64).tolist()


def count_trained_rows(trainer, drifting_prompts: set[str], record: dict) -> None:
    """Wraps the trainer's scoring pass to count trained rows with non-zero advantage (and drifting prompts trained
    after the drift) on the batch TRL scored."""
    score = trainer._generate_and_score_completions

    def counted(inputs):
        output = score(inputs)
        if trainer.model.training:
            signal = output["advantages"] != 0
            record["informative_rows"] += int(signal.sum())
            if trainer.state.global_step >= DRIFT_STEP:
                # The trained batch's prompts, which dynamic sampling chose: TRL's prompt ids, not `inputs`.
                prompts = trainer.processing_class.batch_decode(output["prompt_ids"], skip_special_tokens=True)
                record["drifting_trained"].update(
                    prompt for prompt, kept in zip(prompts, signal.tolist(), strict=True)
                    if kept and prompt in drifting_prompts
                )  # fmt: skip
        return output

    trainer._generate_and_score_completions = counted


def run_arm(job: dict) -> dict:
    seed, arm, steps = job["seed"], job["arm"], job["steps"]
    dataset = synthetic_dataset(job["dataset"])
    drifting = {row["prompt"] for row in dataset if row["drifts"]}
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed, hidden_size=32, num_layers=1)
    shared = dict(
        use_cpu=True, bf16=False, per_device_train_batch_size=GROUPS_PER_STEP * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS, max_completion_length=4, max_steps=steps, learning_rate=1e-4,
        logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True, seed=seed,
    )  # fmt: skip
    output_dir = os.path.join(job["scratch_dir"], f"{job['dataset']}-{arm}-{seed}".replace(" ", "_"))
    if ARMS[arm] is None:
        trainer_class, config = GRPOTrainer, GRPOConfig(output_dir, **shared)
    else:
        trainer_class, config = DAPOTrainer, DAPOConfig(output_dir, **ARMS[arm], **shared)
    reward = PassProbabilityReward(seed)
    trainer = trainer_class(model, [reward], args=config, train_dataset=dataset, processing_class=tokenizer)
    quiet(trainer)
    record = {"informative_rows": 0, "drifting_trained": set()}
    count_trained_rows(trainer, drifting, record)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return {
        "dataset": job["dataset"], "arm": arm, "seed": seed,
        "generated_completions": reward.scored,
        "informative_rows": record["informative_rows"],
        "trained_rows": steps * GROUPS_PER_STEP * NUM_GENERATIONS,
        "drifting_prompts": len(drifting),
        "drifting_trained_after_drift": len(record["drifting_trained"]),
        "filled_steps": sum(entry.get("dynamic_sampling/filled", 0.0) for entry in logs),
    }  # fmt: skip


def run_all(cli, scratch_dir: str) -> list[dict]:
    steps = SMOKE["steps"] if cli.smoke else STEPS
    jobs = [{"dataset": dataset, "arm": arm, "seed": seed, "steps": steps, "scratch_dir": scratch_dir}
            for dataset in DATASETS for seed in cli.seeds for arm in ARMS]
    context = multiprocessing.get_context("spawn")
    runs = []
    with context.Pool(cli.workers, initializer=configure_runtime, initargs=(1,)) as pool:
        for run in pool.imap_unordered(run_arm, jobs, chunksize=1):
            print(f"{run['dataset']:>17} seed {run['seed']} {run['arm']:>32}: "
                  f"{run['generated_completions'] / max(run['informative_rows'], 1):.3f}", flush=True)
            runs.append(run)
    order = {(job["dataset"], job["arm"], job["seed"]): i for i, job in enumerate(jobs)}
    return sorted(runs, key=lambda run: order[(run["dataset"], run["arm"], run["seed"])])


def per_informative_row(run: dict) -> float:
    return run["generated_completions"] / run["informative_rows"] if run["informative_rows"] else float("nan")


def table(runs: list[dict]) -> str:
    header = ["dataset", *(f"`{arm}`" if arm.endswith("Trainer") else arm for arm in ARMS)]
    rows = []
    for dataset in DATASETS:
        cells = [dataset]
        baseline = [per_informative_row(run) for run in runs
                    if run["dataset"] == dataset and run["arm"] == "GRPOTrainer"]
        for arm in ARMS:
            values = [per_informative_row(run) for run in runs if run["dataset"] == dataset and run["arm"] == arm]
            ratios = [value / base for value, base in zip(values, baseline, strict=True)]
            text = stats.t_interval(values).text(2)
            cells.append(text if arm == "GRPOTrainer" else f"{text} ({stats.t_interval(ratios).mean:.2f}x)")
        rows.append(cells)
    return markdown_table(header, rows)


def drift_table(runs: list[dict]) -> str:
    rows = []
    for arm in ARMS:
        found = [run["drifting_trained_after_drift"] for run in runs if run["dataset"] == "drift" and run["arm"] == arm]
        total = next(run["drifting_prompts"] for run in runs if run["dataset"] == "drift")
        rows.append([arm, f"{stats.t_interval(found).text(1)} of {total}"])
    return markdown_table(["arm", f"drifting prompts trained after step {DRIFT_STEP}"], rows)


def report(runs: list[dict], command: str, seconds: float, machine: str) -> str:
    seeds = sorted({run["seed"] for run in runs})
    filled = sum(run["filled_steps"] for run in runs)
    return f"""# Generation cost: completions generated per trained row that carries signal

Measured by `{command}` in {seconds / 60:.1f} minutes on {machine}. The counts do not depend on the machine's
speed. Setup and measure: the docstring of `benchmarks/dynamic_sampling_cost/generation_cost.py`
({NUM_PROMPTS} prompts of known pass probability, {GROUPS_PER_STEP} prompts x {NUM_GENERATIONS} completions a step,
{STEPS} steps, real trainers on the toy task's tiny policy). Each cell: generated completions per trained row with
non-zero advantage, mean over seeds {seeds} with its 95% t-interval, and in brackets the mean over seeds of its ratio
to `GRPOTrainer`'s on the same seed. Steps whose batch had to be filled with degenerate groups, all runs together: {filled:.0f}.

{table(runs)}

Prompts that drift from always wrong to mixed at step {DRIFT_STEP} (the `drift` dataset): how many distinct ones
each arm trained on after the drift (every arm can reach all of them; an arm that skipped them for good would show 0):

{drift_table(runs)}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_seeded_report_arguments(parser, DEFAULT_SEEDS, DEFAULT_OUTPUT)
    parser.add_argument("--replot", action="store_true", help="rewrite the report from the JSON beside --output")
    cli = parser.parse_args(argv)
    if cli.replot:
        output = Path(cli.output or DEFAULT_OUTPUT)
        saved = json.loads(output.with_suffix(".json").read_text(encoding="utf-8"))
        output.write_text(report(saved["runs"], saved["command"], saved["seconds"], saved["machine"]), encoding="utf-8")
        return 0
    cli.seeds = cli.seeds or (SMOKE["seeds"] if cli.smoke else DEFAULT_SEEDS)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch_dir:
        runs = run_all(cli, scratch_dir)
    command = command_line(__spec__.name, argv)
    machine = describe_machine()
    seconds = time.perf_counter() - started
    text = report(runs, command, seconds, machine)
    print(text)
    output = cli.output or (None if cli.smoke else DEFAULT_OUTPUT)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        write_json({"command": command, "seconds": seconds, "machine": machine, "runs": runs},
                   str(Path(output).with_suffix(".json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
