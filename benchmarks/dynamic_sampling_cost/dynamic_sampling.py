"""What dynamic sampling costs and saves on the graded task, with carrying of surplus groups and prompt skipping.

    python -m benchmarks.dynamic_sampling_cost.dynamic_sampling [--seeds 0 1 2] [--workers 2] [--smoke] [--output PATH]

Four arms, each trained from the same warm-started policy of a seed at 8 and at 64 prompt groups per step:
`off` (no dynamic sampling), `ds` (dynamic sampling as published, surplus informative groups dropped), `carry`
(`dynamic_sampling_carry_surplus=True`, no skipping) and `carry+skip` (also `skip_degenerate_prompts=True`). The training set
is a fixed random subset of the graded task's problems, small enough that every run sees it several times, so
that prompt skipping has a history to act on from the second epoch.

Per arm and size, over seeds (mean and 95% t-interval): the pass rate p (informative / generated groups),
generated groups per trained group overall and from the second epoch on, that ratio times p (1.00: every
informative group generated was trained), generation rounds per step, informative groups dropped, prompts skipped,
median step time, generated completion tokens and held-out greedy accuracy after training. Writes a Markdown
report (default docs/results/dynamic_sampling_benchmark.md) and the raw runs as JSON beside it.
"""

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.shared import stats, tasks
from benchmarks.shared.instruments import StepTimer
from benchmarks.shared.outcome_probe import OutcomeProbe
from benchmarks.shared.output import command_line, markdown_table, write_json
from benchmarks.shared.policy import quiet
from benchmarks.shared.settings import (
    DAPO_AS_PUBLISHED, REPO_ROOT, TaskSettings, add_seeded_report_arguments, configure_runtime, training_kwargs,
)  # fmt: skip
from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.machine import describe_machine

DEFAULT_OUTPUT = REPO_ROOT / "docs" / "results" / "dynamic_sampling_benchmark.md"
ARMS = {
    "off": {"dynamic_sampling": False},
    "ds": DAPO_AS_PUBLISHED,
    "carry": {**DAPO_AS_PUBLISHED, "dynamic_sampling_carry_surplus": True},
    "carry+skip": {"dynamic_sampling_carry_surplus": True, "skip_degenerate_prompts": True},
}
NUM_GENERATIONS = 8
TRAIN_PROMPTS = 192  # 24 steps an epoch at 8 groups, 3 at 64
STEPS = {8: 72, 64: 15}  # three epochs at 8 groups, five at 64
DEFAULT_SEEDS = [0, 1, 2]
SMOKE = {"steps": {4: 1}, "train_prompts": 16, "warm_start_steps": 20, "seeds": [0]}


def run_arm(job: dict) -> dict:
    """Trains one (seed, size, arm) from the seed's saved warm-started policy; runs in a worker process."""
    settings = TaskSettings(**job["settings"])
    task = tasks.load_warm_task("graded", job["seed"], settings, job["weights"])
    groups, steps = job["groups"], job["steps"]
    settings.batch_size, settings.max_steps = groups * NUM_GENERATIONS, steps
    settings.max_completion_length = task.max_completion_length
    config = DAPOConfig(
        os.path.join(job["scratch_dir"], f"{job['arm']}-{groups}-{job['seed']}"),
        overlong_buffer_length=task.max_completion_length // 4,
        **ARMS[job["arm"]],
        **training_kwargs(settings, job["seed"], use_vllm=False),
    )
    probe = OutcomeProbe(task.reward_funcs[0], NUM_GENERATIONS)
    timer = StepTimer()
    train_dataset = task.train_dataset.shuffle(seed=job["seed"]).select(range(job["train_prompts"]))
    trainer = DAPOTrainer(
        task.model, [probe.reward_func], args=config, train_dataset=train_dataset,
        processing_class=task.tokenizer, callbacks=[timer],
    )  # fmt: skip
    quiet(trainer)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    series = probe.series(steps)
    return {
        "arm": job["arm"],
        "groups": groups,
        "seed": job["seed"],
        "steps_per_epoch": math.ceil(job["train_prompts"] / groups),
        # Every generated group passes the reward once (dynamic sampling's replay reuses the scores).
        "generated_groups": series["groups"],
        "informative_groups": [g - c - w for g, c, w in zip(series["groups"], series["all_correct"], series["all_wrong"])],
        "tokens": series["tokens"],
        **{key: [entry.get(f"dynamic_sampling/{key}", 0.0) for entry in logs]
           for key in ("rounds", "dropped_informative_groups", "skipped_prompts", "carried_groups")},
        "step_seconds": timer.durations,
        "accuracy": task.overall_accuracy(task.accuracy_by_level(trainer.model)),
    }


def _warm_start(job: dict) -> dict:
    return tasks.warm_start_and_save("graded", job["seed"], TaskSettings(**job["settings"]), job["weights"])


def run_all(cli, scratch_dir: str) -> list[dict]:
    settings = TaskSettings(
        warm_start_steps=SMOKE["warm_start_steps"] if cli.smoke else tasks.TASK_DEFAULT,
        max_completion_length=tasks.TASK_DEFAULT,
        num_generations=NUM_GENERATIONS,
    )
    base = {"settings": asdict(settings), "scratch_dir": scratch_dir,
            "train_prompts": SMOKE["train_prompts"] if cli.smoke else TRAIN_PROMPTS}
    warm_jobs = [{**base, "seed": seed, "weights": tasks.warm_weights_path(scratch_dir, seed)} for seed in cli.seeds]
    steps = SMOKE["steps"] if cli.smoke else STEPS
    jobs = [{**job, "groups": groups, "steps": steps[groups], "arm": arm}
            for job in warm_jobs for groups in steps for arm in ARMS]
    context = multiprocessing.get_context("spawn")
    with context.Pool(cli.workers, initializer=configure_runtime, initargs=(1,)) as pool:
        pool.map(_warm_start, warm_jobs, chunksize=1)
        runs = []
        for run in pool.imap_unordered(run_arm, jobs, chunksize=1):
            print(f"seed {run['seed']} {run['groups']:>2} groups {run['arm']:>10}: accuracy {run['accuracy']:.3f}, "
                  f"{sum(run['tokens'])} tokens, {sum(run['step_seconds']):.1f} s", flush=True)
            runs.append(run)
    return sorted(runs, key=lambda run: (run["groups"], list(ARMS).index(run["arm"]), run["seed"]))


def summarize(run: dict) -> dict:
    """One run's figures; the generation cost from the second epoch on is where skipping has a history."""
    groups, later = run["groups"], slice(run["steps_per_epoch"], None)
    generated, informative = sum(run["generated_groups"]), sum(run["informative_groups"])
    trained = groups * len(run["generated_groups"])
    later_generated = sum(run["generated_groups"][later])
    later_trained = groups * len(run["generated_groups"][later])
    pass_rate = informative / generated if generated else math.nan
    per_trained = generated / trained
    return {
        "pass_rate": pass_rate,
        "per_trained": per_trained,
        "per_trained_times_p": per_trained * pass_rate,
        "per_trained_later": later_generated / later_trained if later_trained else math.nan,
        "rounds": statistics.fmean(run["rounds"]) if run["arm"] != "off" else 1.0,
        "dropped_share": sum(run["dropped_informative_groups"]) / informative if informative else math.nan,
        "skipped_per_step": statistics.fmean(run["skipped_prompts"]),
        "step_seconds": statistics.median(run["step_seconds"]),
        "tokens": float(sum(run["tokens"])),
        "accuracy": run["accuracy"],
    }


COLUMNS = {
    "pass_rate": ("pass rate p", 3),
    "per_trained": ("generated / trained groups", 2),
    "per_trained_times_p": ("x p", 2),
    "per_trained_later": ("generated / trained, epoch 2 on", 2),
    "rounds": ("rounds / step", 2),
    "dropped_share": ("informative dropped", 3),
    "skipped_per_step": ("prompts skipped / step", 1),
    "step_seconds": ("median step s", 2),
    "tokens": ("generated tokens", 0),
    "accuracy": ("held-out accuracy", 3),
}


def tables(runs: list[dict]) -> str:
    sections = []
    for groups in sorted({run["groups"] for run in runs}):
        rows = []
        for arm in ARMS:
            figures = [summarize(run) for run in runs if run["groups"] == groups and run["arm"] == arm]
            rows.append([f"`{arm}`"] + [stats.t_interval([f[key] for f in figures]).text(digits)
                                        for key, (_, digits) in COLUMNS.items()])
        steps = len(next(run for run in runs if run["groups"] == groups)["generated_groups"])
        sections.append(f"### {groups} groups per step ({steps} steps)\n\n"
                        + markdown_table(["arm", *(title for title, _ in COLUMNS.values())], rows))
    return "\n\n".join(sections)


def report(runs: list[dict], command: str, seconds: float, machine: str) -> str:
    return f"""# Dynamic sampling benchmark: generation cost, carrying and prompt skipping

Measured by `{command}` in {seconds / 60:.1f} minutes on {machine}.
Step times depend on the machine and its load; the generation counts and accuracies do not depend on load, but
follow the CPU's float trajectory. Task: the graded task (`trl_variants.toy.graded`), {TRAIN_PROMPTS} of its training
problems, {NUM_GENERATIONS} completions a prompt, one optimizer step per generation batch, soft overlong punishment on. Every
figure is the mean over seeds with its 95% t-interval; "x p" is generated groups per trained group times the pass
rate, so 1.00 means every informative group generated was trained and the generation cost is at its floor 1/p.

{tables(runs)}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_seeded_report_arguments(parser, DEFAULT_SEEDS, DEFAULT_OUTPUT)
    cli = parser.parse_args(argv)
    cli.seeds = cli.seeds or (SMOKE["seeds"] if cli.smoke else DEFAULT_SEEDS)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch_dir:
        runs = run_all(cli, scratch_dir)
    command = command_line(__spec__.name, argv)
    text = report(runs, command, time.perf_counter() - started, describe_machine())
    print(text)
    output = cli.output or (None if cli.smoke else DEFAULT_OUTPUT)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        write_json(runs, str(Path(output).with_suffix(".json")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
