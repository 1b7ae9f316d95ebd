"""The real-model study's runner: every (arm, seed) run of docs/results/real_model_study_method.md, with exactly the
settings that method fixes.

    python -m benchmarks.real_model_study.study step0                    # the grid's shared step-0 evaluation, once
    python -m benchmarks.real_model_study.study run --arm dapo --seed 0  # one (arm, seed) run, resumable
    python -m benchmarks.real_model_study.study grid [--arms ...] [--seeds ...] [--workers 2] [--deadline SECONDS]
    python -m benchmarks.real_model_study.study report                   # study_report.py: tables, plot, decision

Each run is its own process at one torch thread. It writes `RUNS_DIR/ARM-seedS.json` after every evaluation and a
checkpoint at every evaluation step (under `RUNS_DIR/checkpoints/`, which git ignores); started again, it resumes
from the last checkpoint, and a complete file is never run again. The grid runs seed-major (all arms of seed 0
first), `--workers` runs at a time, computing the shared step-0 evaluation first when it is missing; with
`--deadline`, each run stops at an evaluation when the next stretch would end after it, so a session's grid can be
stopped without losing work and resumed by the same command.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.shared.process_grid import run_grid
from benchmarks.shared.settings import DAPO_AS_PUBLISHED, REPO_ROOT

from .design import ARMS, GRID_ARMS, HELD_OUT_SEED, LOGGED, RUNS_DIR, SEEDS, SMOKE, STEP0_FILE, TASK_NAME, Settings
from .pilot import pilot_source
from .task import CANDIDATES, canonical_form

# A run still going this long after the deadline is stopped; its result file keeps every evaluation it finished.
DEADLINE_GRACE_S = 120
# No run starts this close to the deadline: its first stretch and checkpoint take 6-10 minutes.
NO_START_WITHIN_S = 600


def result_path(runs_dir: str, arm: str, seed: int) -> str:
    return os.path.join(runs_dir, f"{arm}-seed{seed}.json")


def arm_trainer_and_config(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "dapo":
        return DAPOTrainer, DAPOConfig(output_dir, **DAPO_AS_PUBLISHED, **shared)
    if arm == "defaults":
        # By name, not by leaving them unset: the arm is what the package's defaults were when the study was designed,
        # and the study's own decision may change those defaults.
        return DAPOTrainer, DAPOConfig(output_dir, skip_degenerate_prompts=True, dynamic_sampling_carry_surplus=True,
                                       **shared)
    if arm == "carry_only":
        return DAPOTrainer, DAPOConfig(output_dir, skip_degenerate_prompts=False, dynamic_sampling_carry_surplus=True,
                                       **shared)
    raise ValueError(f"--arm {arm!r} is not an arm of the study; expected one of {list(ARMS)}.")


def build_task(settings: Settings, seed: int):
    """The held-out set (seed `HELD_OUT_SEED`, distinct canonical forms) and seed `seed`'s training problems (distinct
    forms, none held out and none the worked example's), with the training problems' forms."""
    from .training_pilot import training_source

    task, config = CANDIDATES[TASK_NAME]
    held_out, _ = pilot_source(task, config, settings.held_out_prompts, seed=HELD_OUT_SEED)
    held_out_forms = {canonical_form(held_out.procedural_dataset[int(row)]["metadata"]["expression"])
                      for row in held_out.dataset["reasoning_gym_index"]}
    train, train_forms = training_source(task, config, settings.train_size, held_out_forms, seed=seed)
    if len(train.dataset) < settings.train_size:
        raise ValueError(f"build_task: only {len(train.dataset)} training problems for seed {seed}; "
                         f"the method asks for {settings.train_size}.")
    return held_out, train, train_forms


def header(arm: str, seed: int, settings: Settings, train, train_forms) -> dict:
    import torch

    from trl_variants.machine import describe_machine

    task, config = CANDIDATES[TASK_NAME]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    return {"arm": arm, "seed": seed, "settings": asdict(settings), "machine": describe_machine(),
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "threads":
            torch.get_num_threads(), "commit": commit, "task": task, "task_config": config,
            "held_out_seed": HELD_OUT_SEED, "train_questions": train.questions,
            "train_indices": list(train.dataset["reasoning_gym_index"]),
            "train_forms": [list(map(list, form)) for form in train_forms]}


def step0(settings: Settings, runs_dir: str) -> dict:
    """The grid's step-0 evaluation (every run starts from the same weights and evaluates with the same generator
    seed, so it is one measurement), computed once and stored in `runs_dir/step0.json`."""
    from dataclasses import asdict as as_dict

    import torch

    from benchmarks.real_model.real_model_recorder import held_out_pass_rate, read_result, write_result
    from trl_variants.real.smollm2 import load_smollm2

    path = os.path.join(runs_dir, STEP0_FILE)
    stored = read_result(path)
    if stored is not None:
        return stored
    torch.set_num_threads(1)  # the runs' thread count, so the arithmetic is theirs
    model, tokenizer = load_smollm2()
    held_out, _, _ = build_task(settings, seed=0)
    started = time.process_time()
    result = held_out_pass_rate(model, tokenizer, held_out, settings, index=0)  # the runs' own evaluation 0
    record = {"settings": asdict(settings), "pass_rate": as_dict(result),
              "cpu_seconds": round(time.process_time() - started, 1), "held_out_questions": held_out.questions}
    os.makedirs(runs_dir, exist_ok=True)
    write_result(path, record)
    return record


def run(arm: str, seed: int, settings: Settings, runs_dir: str, deadline: float | None) -> dict:
    """Trains one arm of one seed from SmolLM2's weights, evaluating and writing its result file every
    `eval_every` steps; resumes from the last checkpoint when an earlier attempt left one."""
    import torch
    from transformers import logging as transformers_logging

    from benchmarks.real_model.real_model_benchmark import shared_config
    from benchmarks.real_model.real_model_recorder import latest_checkpoint, read_result
    from benchmarks.shared.outcome_probe import OutcomeProbe
    from benchmarks.shared.policy import quiet
    from trl_variants.real.evaluation import PassRate
    from trl_variants.real.smollm2 import load_smollm2

    from .study_recorder import StudyRecorder

    path = result_path(runs_dir, arm, seed)
    previous = read_result(path)
    if previous and previous["complete"]:
        return previous
    torch.set_num_threads(1)
    transformers_logging.set_verbosity_error()
    shared_step0 = PassRate(**step0(settings, runs_dir)["pass_rate"])
    output_dir = os.path.join(runs_dir, "checkpoints", f"{arm}-seed{seed}")
    resume = latest_checkpoint(output_dir) if previous else None
    model, tokenizer = load_smollm2()
    held_out, train, train_forms = build_task(settings, seed)
    probe = OutcomeProbe(train.reward_func, settings.num_generations, passed=lambda reward: reward >= 1.0,
                         group_key="reasoning_gym_index")
    trainer_class, config = arm_trainer_and_config(arm, output_dir, shared_config(settings, seed, checkpoint=True))
    recorder = StudyRecorder(path, header(arm, seed, settings, train, train_forms), probe, held_out, tokenizer,
                             settings, LOGGED, deadline, shared_step0,
                             previous=(previous, int(resume.rsplit("-", 1)[1])) if resume else None)
    trainer = trainer_class(model, [probe.reward_func], args=config, train_dataset=train.dataset,
                            processing_class=tokenizer, callbacks=[recorder])
    quiet(trainer)
    trainer.train(resume_from_checkpoint=resume)
    record = recorder.finish()
    if record["complete"]:  # a complete run is never resumed: its checkpoints (1.6 GB each) go
        shutil.rmtree(output_dir, ignore_errors=True)
    return record


def grid(arms: list[str], seeds: list[int], workers: int, deadline_seconds: float | None, passthrough: list[str],
         runs_dir: str) -> None:
    """The shared step-0 evaluation, then every (arm, seed) run not yet complete through `run_grid`."""
    from benchmarks.real_model.real_model_recorder import is_complete

    os.makedirs(runs_dir, exist_ok=True)
    subprocess.run([sys.executable, "-m", __spec__.name, "step0", *passthrough], cwd=REPO_ROOT, check=True)
    run_grid(__spec__.name, arms, seeds, workers=workers, log_dir=runs_dir, extra_arguments=passthrough,
             deadline_seconds=deadline_seconds, grace_s=DEADLINE_GRACE_S, poll_s=2,
             is_complete=lambda arm, seed: is_complete(result_path(runs_dir, arm, seed)),
             no_start_within_s=NO_START_WITHIN_S)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("step0", "run", "grid", "report"):
        command = commands.add_parser(name)
        command.add_argument("--runs_dir", default=RUNS_DIR)
        if name != "report":
            command.add_argument("--smoke", action="store_true", help="tiny settings that only check the script works")
    commands.choices["run"].add_argument("--arm", choices=list(ARMS), required=True)
    commands.choices["run"].add_argument("--seed", type=int, required=True)
    commands.choices["run"].add_argument("--deadline_unix", type=float, default=None)
    grid_parser = commands.choices["grid"]
    grid_parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(GRID_ARMS))
    grid_parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    grid_parser.add_argument("--workers", type=int, default=2)
    grid_parser.add_argument("--deadline", type=float, default=None, help="seconds from now after which runs stop "
                             "at an evaluation instead of starting another stretch of steps")
    commands.choices["report"].add_argument("--output", default=None, help="Markdown file (a PNG plot beside it)")
    cli = parser.parse_args(argv)

    if cli.command == "report":
        from .study_report import report

        print(report(cli.runs_dir, cli.output))
        return 0
    settings = SMOKE if cli.smoke else Settings()
    if cli.command == "step0":
        record = step0(settings, cli.runs_dir)
        print(f"step 0: held-out pass rate {record['pass_rate']['pass_rate']:.3f} "
              f"({record['pass_rate']['prompts']} problems)", flush=True)
    elif cli.command == "grid":
        passthrough = ["--runs_dir", cli.runs_dir, *(["--smoke"] if cli.smoke else [])]
        grid(cli.arms, cli.seeds, cli.workers, cli.deadline, passthrough, cli.runs_dir)
    else:
        record = run(cli.arm, cli.seed, settings, cli.runs_dir, cli.deadline_unix)
        print(f"{cli.arm} seed {cli.seed}: held-out pass rate {record['accuracy'][0]:.3f} -> "
              f"{record['accuracy'][-1]:.3f} at step {record['eval_steps'][-1]}, {record['eval_tokens'][-1]} generated "
              f"tokens, complete={record['complete']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
