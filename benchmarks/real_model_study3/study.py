"""Study 3's runner: every (arm, seed) run of docs/results/real_model_study3_method.md, with exactly the settings that
method fixes (design.py).

    python -m benchmarks.real_model_study3.study pilot                      # the pilot: each arm once, seed 10
    python -m benchmarks.real_model_study3.study step0                      # the grid's shared step-0 evaluation
    python -m benchmarks.real_model_study3.study run --arm dapo --seed 0    # one (arm, seed) run, resumable
    python -m benchmarks.real_model_study3.study grid [--arms ...] [--seeds ...] [--workers 2]
    python -m benchmarks.real_model_study3.study report                     # report.py, from the result files

Each run is its own process at one torch thread, trains on its seed's own 120 problems (split.py) and writes
`RUNS_DIR/ARM-seedS.json` after every evaluation (recorder.py). It checkpoints at every generation-batch boundary
(the only points from which a run with several updates per batch resumes exactly) under `RUNS_DIR/checkpoints/`,
which git ignores; started again, it resumes from the last one, and a complete run is never run again. The pilot's
runs go to `PILOT_DIR` with the pilot's settings (the first budget only, no fixed step).
"""

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import time
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.real_model_study.study import result_path
from benchmarks.shared.process_grid import run_grid
from benchmarks.shared.settings import DAPO_AS_PUBLISHED, REPO_ROOT

from .design import (ARMS, DRAW_SEED, DRAW_SIZE, LOGGED, MAX_STEPS, PILOT_DIR, PILOT_SEED, PILOT_SETTINGS, RESULTS_DIR,
                     RUNS_DIR, SEEDS, SMOKE, STEP0_FILE, TASK_NAME, Settings)


def arm_trainer_and_config(arm: str, output_dir: str, shared: dict):
    """The trainer class and config of `arm`. The `defaults` arm names carrying and skipping by value, the values
    `DAPOConfig()` resolves to in this layout when the study starts, so a decision cannot change what it trains."""
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "dapo":
        return DAPOTrainer, DAPOConfig(output_dir, **DAPO_AS_PUBLISHED, **shared)
    if arm == "defaults":
        return DAPOTrainer, DAPOConfig(output_dir, skip_degenerate_prompts=False, dynamic_sampling_carry_surplus=True,
                                       **shared)
    raise ValueError(f"--arm {arm!r} is not an arm of study 3; expected one of {list(ARMS)}.")


def layout_config(settings: Settings, seed: int) -> dict:
    """The trainer config every arm shares: the first benchmark's (float32, constant learning rate, no warm-up,
    a log line per step) in the study's layout, with a checkpoint at every generation-batch boundary."""
    from benchmarks.real_model.real_model_benchmark import shared_config

    boundaries = types.SimpleNamespace(**dataclasses.asdict(settings), max_steps=MAX_STEPS,
                                       eval_every=settings.steps_per_generation)
    return {**shared_config(boundaries, seed, checkpoint=True), "num_iterations": 1,
            "gradient_accumulation_steps": settings.gradient_accumulation_steps,
            "steps_per_generation": settings.steps_per_generation}


def build_task(settings: Settings, seed: int):
    """The held-out set and seed `seed`'s training problems (split.py's block `seed`; the pilot's is block
    `PILOT_SEED`), as `ReasoningGymSource`s in study 2's prompt format, with the block's draw indices and forms."""
    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import reasoning_gym_source

    from benchmarks.real_model_study.task import CANDIDATES

    from .split import study_problems

    if not 0 <= seed <= PILOT_SEED:
        raise ValueError(f"build_task: seed={seed}; study 3's blocks are seeds 0-{PILOT_SEED - 1} and the pilot's "
                         f"{PILOT_SEED}.")
    problems = study_problems(settings, PILOT_SEED + 1, DRAW_SEED, DRAW_SIZE)
    task, config = CANDIDATES[TASK_NAME]
    source = reasoning_gym_source(task, config, size=DRAW_SIZE, seed=DRAW_SEED, example=task_example(task, config))
    row_of = {int(index): row for row, index in enumerate(source.dataset["reasoning_gym_index"])}

    def restricted(indices):
        rows = [row_of[index] for index in indices]
        return dataclasses.replace(source, dataset=source.dataset.select(rows),
                                   questions=[source.questions[row] for row in rows])

    return restricted(problems["held_out"]["indices"]), restricted(problems["train"][seed]["indices"]), \
        problems["train"][seed]


def evaluator(tokenizer, held_out, settings: Settings):
    """`evaluate(model, seed, greedy)`: one completion per held-out problem, greedy or sampled at the study's
    temperature under generator `seed`, in batches of 64 (memory stays flat on a CPU)."""
    from trl_variants.real.evaluation import sampled_pass_rate

    def evaluate(model, seed: int, greedy: bool):
        return sampled_pass_rate(model, tokenizer, held_out, samples_per_prompt=1, greedy=greedy,
                                 max_new_tokens=settings.max_completion_length,
                                 temperature=settings.sampled_eval_temperature, batch_size=64, seed=seed)

    return evaluate


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()


def step0(settings: Settings, runs_dir: str) -> dict:
    """The grid's step-0 evaluation, greedy and sampled (every arm starts from the same weights and uses the same
    generator seed: one measurement), computed once into `runs_dir/step0.json`."""
    import torch

    from benchmarks.real_model.real_model_recorder import read_result, write_result
    from trl_variants.machine import describe_machine
    from trl_variants.real.smollm2 import load_smollm2

    from .recorder import point_seed

    path = os.path.join(runs_dir, STEP0_FILE)
    stored = read_result(path)
    if stored is not None:
        return stored
    torch.set_num_threads(1)  # the runs' thread count, so the arithmetic is theirs
    model, tokenizer = load_smollm2()
    held_out, _, _ = build_task(settings, seed=0)
    evaluate = evaluator(tokenizer, held_out, settings)
    record = {"settings": dataclasses.asdict(settings), "machine": describe_machine(), "commit": commit(),
              "seed": point_seed(settings, "step0"), "held_out_questions": held_out.questions}
    for name, greedy in (("greedy", True), ("sampled", False)):
        started = time.process_time()
        record[name] = dataclasses.asdict(evaluate(model, record["seed"], greedy))
        record[f"{name}_cpu_seconds"] = round(time.process_time() - started, 2)
    os.makedirs(runs_dir, exist_ok=True)
    write_result(path, record)
    return record


def run(arm: str, seed: int, settings: Settings, runs_dir: str) -> dict:
    """Trains one arm of one seed from SmolLM2's weights until every evaluation point is read, resuming from the
    last generation-batch checkpoint when an earlier attempt left one."""
    import torch
    from transformers import logging as transformers_logging

    from benchmarks.real_model.real_model_recorder import latest_checkpoint, read_result
    from benchmarks.shared.outcome_probe import OutcomeProbe
    from benchmarks.shared.policy import quiet
    from trl_variants.machine import describe_machine
    from trl_variants.real.smollm2 import load_smollm2

    from benchmarks.real_model_study.task import CANDIDATES

    from .recorder import BudgetRecorder, RunComplete, truncate_to_checkpoint

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
    held_out, train, block = build_task(settings, seed)
    task, task_config = CANDIDATES[TASK_NAME]
    header = {"arm": arm, "seed": seed, "settings": dataclasses.asdict(settings), "machine": describe_machine(),
              "threads": torch.get_num_threads(), "task": task, "task_config": task_config, "draw_seed": DRAW_SEED,
              "train_indices": block["indices"], "train_forms": [list(map(list, form)) for form in block["forms"]]}
    attempt = {"commit": commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average": os.getloadavg()[0],
               "resumed_from_step": resumed_from}
    probe = OutcomeProbe(train.reward_func, settings.num_generations, passed=lambda reward: reward >= 1.0,
                         group_key="reasoning_gym_index")
    trainer_class, config = arm_trainer_and_config(arm, output_dir, layout_config(settings, seed))
    recorder = BudgetRecorder(path, header, attempt, probe, settings, LOGGED, evaluator(tokenizer, held_out, settings),
                              previous=truncate_to_checkpoint(previous, resumed_from) if checkpoint else None)
    trainer = trainer_class(model, [recorder.wrap_reward(probe.reward_func)], args=config,
                            train_dataset=train.dataset, processing_class=tokenizer, callbacks=[recorder])
    quiet(trainer)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except RunComplete:
        pass  # every evaluation point is read; the batch under way would train nothing any evaluation reads
    record = recorder.finish()
    if record["complete"]:  # a complete run is never resumed: its checkpoints (1.6 GB each) go
        shutil.rmtree(output_dir, ignore_errors=True)
    return record


def grid(arms: list[str], seeds: list[int], workers: int, passthrough: list[str], runs_dir: str,
         with_step0: bool) -> None:
    """The shared step-0 evaluation when asked, then every (arm, seed) run not yet complete, `workers` at a time."""
    from benchmarks.real_model.real_model_recorder import is_complete

    os.makedirs(runs_dir, exist_ok=True)
    if with_step0:
        subprocess.run([sys.executable, "-m", __spec__.name, "step0", *passthrough], cwd=REPO_ROOT, check=True)
    run_grid(__spec__.name, arms, seeds, workers=workers, log_dir=runs_dir, extra_arguments=passthrough, poll_s=2,
             is_complete=lambda arm, seed: is_complete(result_path(runs_dir, arm, seed)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("step0", "run", "grid", "pilot", "report"):
        command = commands.add_parser(name)
        command.add_argument("--runs_dir", default=None, help=f"default {RUNS_DIR} ({PILOT_DIR} for the pilot)")
        if name != "report":
            command.add_argument("--smoke", action="store_true", help="tiny settings that only check the runner "
                                 "works (needs --runs_dir)")
    commands.choices["run"].add_argument("--arm", choices=list(ARMS), required=True)
    commands.choices["run"].add_argument("--seed", type=int, required=True)
    commands.choices["run"].add_argument("--pilot", action="store_true", help="the pilot's settings")
    for name in ("grid", "pilot"):
        commands.choices[name].add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
        commands.choices[name].add_argument("--workers", type=int, default=2)
    commands.choices["grid"].add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    cli = parser.parse_args(argv)

    if cli.command == "report":
        from .report import report

        print(report(cli.runs_dir or RESULTS_DIR), end="")
        return 0
    if cli.smoke and cli.runs_dir is None:
        parser.error("--smoke needs --runs_dir: a smoke run's files never go among the study's results.")
    pilot = cli.command == "pilot" or getattr(cli, "pilot", False)
    runs_dir = cli.runs_dir or (PILOT_DIR if pilot else RUNS_DIR)
    settings = SMOKE if cli.smoke else PILOT_SETTINGS if pilot else Settings()
    passthrough = ["--runs_dir", runs_dir, *(["--smoke"] if cli.smoke else []), *(["--pilot"] if pilot else [])]
    if cli.command == "step0":
        record = step0(settings, runs_dir)
        print(f"step 0: greedy accuracy {record['greedy']['pass_rate']:.3f}, sampled pass rate "
              f"{record['sampled']['pass_rate']:.3f} ({record['greedy']['prompts']} problems)", flush=True)
    elif cli.command in ("grid", "pilot"):
        seeds = [PILOT_SEED] if pilot else cli.seeds
        grid(cli.arms, seeds, cli.workers, passthrough, runs_dir, with_step0=not pilot)
    else:
        if pilot and cli.seed != PILOT_SEED:
            parser.error(f"--pilot trains on the pilot's block: --seed {PILOT_SEED}, not {cli.seed}.")
        record = run(cli.arm, cli.seed, settings, runs_dir)
        points = ", ".join(f"{point['kind']} {point.get('budget', point['step'])}: greedy "
                           f"{point['greedy']['pass_rate']:.3f}" for point in record["evaluations"])
        print(f"{cli.arm} seed {cli.seed}: {points}; complete={record['complete']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
