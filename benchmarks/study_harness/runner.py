"""The runner of a study (study.py): every (arm, seed) run in its own process at one torch thread, on its seed's own
training problems, resumable, plus the shared step-0 evaluation, the grid and the report.

    python -m STUDY_MODULE step0                       # the step-0 evaluation every arm starts from, once
    python -m STUDY_MODULE run --arm ARM --seed SEED   # one run, resumable
    python -m STUDY_MODULE grid [--arms ...] [--seeds ...] [--workers 2]   # step 0, then every run not complete
    python -m STUDY_MODULE report                      # report.py, from the result files

A run writes `RUNS_DIR/ARM-seedS.json` after every evaluation and checkpoints at every generation-batch boundary
(the only points from which a run with several updates per batch resumes exactly) under `RUNS_DIR/checkpoints/`;
started again it resumes from the last one, and a complete run is never run again. `--smoke` runs the study's tiny
settings into `--runs_dir`, to check that the runner works.
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time

from benchmarks.shared.process_grid import run_grid
from benchmarks.shared.settings import REPO_ROOT

from .budgets import point_seed
from .problems import study_problems
from .recorder import (BudgetRecorder, RunComplete, is_complete, latest_checkpoint, read_result,
                       truncate_to_checkpoint, write_result)

STEP0_FILE = "step0.json"


def result_path(runs_dir: str, arm: str, seed: int) -> str:
    return os.path.join(runs_dir, f"{arm}-seed{seed}.json")


def layout_config(settings, seed: int, checkpoints: bool = True) -> dict:
    """The trainer config every arm shares: float32, constant learning rate, no warm-up, a log line per step, the
    study's layout, and a checkpoint at every generation-batch boundary."""
    import torch

    return dict(
        use_cpu=not torch.cuda.is_available(), bf16=False,
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations, max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        max_steps=settings.max_steps, logging_steps=1, report_to=[], disable_tqdm=True, seed=seed,
        num_iterations=1, gradient_accumulation_steps=settings.gradient_accumulation_steps,
        steps_per_generation=settings.steps_per_generation,
        save_strategy="steps" if checkpoints else "no", save_steps=settings.steps_per_generation,
        save_total_limit=1,
    )  # fmt: skip


def build_task(study, seed: int):
    """The held-out set and seed `seed`'s training block as `ReasoningGymSource`s with the real-model example's
    prompt, and the block's indices and keys."""
    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import reasoning_gym_source

    if not 0 <= seed < len(study.seeds) + 1:
        raise ValueError(f"build_task: seed={seed}; {study.name}'s blocks are 0-{len(study.seeds)} (the last one "
                         "for a pilot).")
    problems = study_problems(study, study.settings, len(study.seeds) + 1)
    task, config = study.task
    source = reasoning_gym_source(task, config, size=study.draw_size, seed=study.draw_seed,
                                  example=task_example(task, config))
    row_of = {int(index): row for row, index in enumerate(source.dataset["reasoning_gym_index"])}

    def restricted(indices):
        rows = [row_of[index] for index in indices]
        return dataclasses.replace(source, dataset=source.dataset.select(rows),
                                   questions=[source.questions[row] for row in rows])

    return restricted(problems["held_out"]["indices"]), restricted(problems["train"][seed]["indices"]), \
        problems["train"][seed]


def evaluator(tokenizer, held_out, settings):
    """`evaluate(model, seed, greedy)`: one completion per held-out problem, greedy or sampled under generator
    `seed`, in batches of 64 (memory stays flat on a CPU)."""
    from trl_variants.real.evaluation import sampled_pass_rate

    def evaluate(model, seed: int, greedy: bool):
        return sampled_pass_rate(model, tokenizer, held_out, samples_per_prompt=1, greedy=greedy,
                                 max_new_tokens=settings.max_completion_length,
                                 temperature=settings.sampled_eval_temperature, batch_size=64, seed=seed)

    return evaluate


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()


def step0(study, runs_dir: str) -> dict:
    """The step-0 evaluation, greedy and sampled: every arm starts from the same weights with the same generator
    seed, so it is one measurement, stored once in `runs_dir/step0.json`."""
    import torch

    from trl_variants.machine import describe_machine
    from trl_variants.real.smollm2 import load_smollm2

    path = os.path.join(runs_dir, STEP0_FILE)
    stored = read_result(path)
    if stored is not None:
        return stored
    torch.set_num_threads(1)  # the runs' thread count, so the arithmetic is theirs
    model, tokenizer = load_smollm2()
    held_out, _, _ = build_task(study, seed=0)
    evaluate = evaluator(tokenizer, held_out, study.settings)
    record = {"settings": dataclasses.asdict(study.settings), "machine": describe_machine(), "commit": commit(),
              "seed": point_seed(study.settings.token_budgets, "step0"), "held_out_questions": held_out.questions}
    for name, greedy in (("greedy", True), ("sampled", False)):
        started = time.process_time()
        record[name] = dataclasses.asdict(evaluate(model, record["seed"], greedy))
        record[f"{name}_cpu_seconds"] = round(time.process_time() - started, 2)
    os.makedirs(runs_dir, exist_ok=True)
    write_result(path, record)
    return record


def run(study, arm: str, seed: int, runs_dir: str) -> dict:
    """Trains one arm of one seed from SmolLM2's weights until every evaluation point is read, resuming from the
    last generation-batch checkpoint an earlier attempt left."""
    import torch
    from transformers import logging as transformers_logging

    from benchmarks.shared.outcome_probe import OutcomeProbe
    from benchmarks.shared.policy import quiet
    from trl_variants.machine import describe_machine
    from trl_variants.real.smollm2 import load_smollm2

    settings = study.settings
    path = result_path(runs_dir, arm, seed)
    previous = read_result(path)
    if previous and previous["complete"]:
        return previous
    torch.set_num_threads(1)
    transformers_logging.set_verbosity_error()
    output_dir = os.path.join(runs_dir, "checkpoints", f"{arm}-seed{seed}")
    checkpoint = latest_checkpoint(output_dir) if previous else None
    resumed_from = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    model, tokenizer = load_smollm2()
    held_out, train, block = build_task(study, seed)
    header = {"study": study.name, "arm": arm, "seed": seed, "settings": dataclasses.asdict(settings),
              "machine": describe_machine(), "threads": torch.get_num_threads(), "task": list(study.task),
              "draw_seed": study.draw_seed, "train_indices": block["indices"]}
    attempt = {"commit": commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average": os.getloadavg()[0],
               "resumed_from_step": resumed_from}
    probe = OutcomeProbe(train.reward_func, settings.num_generations, passed=lambda reward: reward >= 1.0,
                         group_key="reasoning_gym_index")
    trainer_class, config = study.trainer_and_config(arm, output_dir, layout_config(settings, seed))
    recorder = BudgetRecorder(path, header, attempt, probe, settings, study.logged,
                              evaluator(tokenizer, held_out, settings),
                              previous=truncate_to_checkpoint(previous, resumed_from) if checkpoint else None)
    trainer = trainer_class(model, [recorder.wrap_reward(probe.reward_func)], args=config,
                            train_dataset=train.dataset, processing_class=tokenizer, callbacks=[recorder])
    quiet(trainer)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except RunComplete:
        pass  # every evaluation point is read; the batch under way would train nothing any evaluation reads
    record = recorder.finish()
    if record["complete"]:  # a complete run is never resumed: its checkpoints go
        shutil.rmtree(output_dir, ignore_errors=True)
    return record


def main(study, module: str, argv=None) -> int:
    """The command line of `study`, whose module is `module` (the grid starts `python -m module run ...`)."""
    parser = argparse.ArgumentParser(description=f"{study.name}: {__doc__.splitlines()[0]}")
    commands = parser.add_subparsers(dest="command", required=True)
    runs_default = os.path.join(study.results_dir, "runs")
    for name in ("step0", "run", "grid", "report"):
        command = commands.add_parser(name)
        command.add_argument("--runs_dir", default=runs_default)
        if name != "report":
            command.add_argument("--smoke", action="store_true", help="tiny settings (needs --runs_dir)")
    commands.choices["run"].add_argument("--arm", choices=list(study.arms), required=True)
    commands.choices["run"].add_argument("--seed", type=int, required=True)
    commands.choices["grid"].add_argument("--arms", nargs="+", choices=list(study.arms), default=list(study.arms))
    commands.choices["grid"].add_argument("--seeds", type=int, nargs="+", default=list(study.seeds))
    commands.choices["grid"].add_argument("--workers", type=int, default=2)
    cli = parser.parse_args(argv)
    if cli.command == "report":
        from .report import report

        print(report(study, cli.runs_dir), end="")
        return 0
    if cli.smoke and cli.runs_dir == runs_default:
        parser.error("--smoke needs --runs_dir: a smoke run's files never go among the study's results.")
    if cli.smoke:
        study = dataclasses.replace(study, settings=study.smoke)
    passthrough = ["--runs_dir", cli.runs_dir, *(["--smoke"] if cli.smoke else [])]
    if cli.command == "step0":
        record = step0(study, cli.runs_dir)
        print(f"step 0: greedy accuracy {record['greedy']['pass_rate']:.3f}, sampled pass rate "
              f"{record['sampled']['pass_rate']:.3f}", flush=True)
    elif cli.command == "grid":
        os.makedirs(cli.runs_dir, exist_ok=True)
        subprocess.run([sys.executable, "-m", module, "step0", *passthrough], cwd=REPO_ROOT, check=True)
        run_grid(module, cli.arms, cli.seeds, workers=cli.workers, log_dir=cli.runs_dir, extra_arguments=passthrough,
                 poll_s=2, is_complete=lambda arm, seed: is_complete(result_path(cli.runs_dir, arm, seed)))
    else:
        record = run(study, cli.arm, cli.seed, cli.runs_dir)
        points = ", ".join(f"{point['kind']} {point.get('budget', point['step'])} {point.get('side', '')}".strip()
                           + f" at {point['tokens']} tokens: greedy {point['greedy']['pass_rate']:.3f}"
                           for point in record["evaluations"])
        print(f"{cli.arm} seed {cli.seed}: {points}; complete={record['complete']}", flush=True)
    return 0
