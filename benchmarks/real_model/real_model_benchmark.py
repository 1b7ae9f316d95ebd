"""Learning on a real model decides the defaults: `GRPOTrainer`, `DAPOTrainer` as published, `DAPOTrainer` with prompt
skipping and carrying, and `DrGRPOTrainer` on SmolLM2-135M-Instruct and a reasoning-gym task, compared at equal
optimizer steps, equal generated completion tokens and equal training time.

    python -m benchmarks.real_model.real_model_benchmark run --arm dapo --seed 0   # one (arm, seed) run, resumable
    python -m benchmarks.real_model.real_model_benchmark grid [--arms ...] [--seeds ...] [--workers N] \
        [--deadline SECONDS]
    python -m benchmarks.real_model.real_model_benchmark report [--output docs/results/real_model_benchmark.md]

The method, fixed before any arm ran, is docs/results/real_model_method.md. Each (arm, seed) run writes its own
result file (`RESULTS_DIR/ARM-seedS.json`, RESULTS_DIR = benchmarks/real_model/results) after every evaluation, so an
interrupted grid keeps what it measured; `run` and `grid` skip runs whose file is complete, and with `--checkpoint` a
run resumes from its last checkpoint (its checkpoints and log under RESULTS_DIR/runs/, which git ignores).
`report` (real_model_report.py) merges the files into tables, a plot and the decision.
"""

import argparse
import os
import sys
from dataclasses import asdict, dataclass

from benchmarks.real_model.arms import ARMS, RESULTS_DIR, arm_trainer_and_config
from benchmarks.shared.process_grid import run_grid

# A run stops by itself at the evaluation before the deadline; one still running this long after it is stopped.
DEADLINE_GRACE_S = 90


@dataclass
class Settings:
    """Everything the arms share; the method file fixes these values. The task, its config and the held-out seed
    are the real-model example's (`trl_variants.real.run`)."""

    held_out_prompts: int = 40
    train_size: int = 1_000
    train_seed: int = 0
    eval_samples: int = 4
    prompts_per_step: int = 2
    num_generations: int = 8
    max_completion_length: int = 32
    learning_rate: float = 1e-5
    max_steps: int = 20
    eval_every: int = 5


SMOKE = Settings(held_out_prompts=4, train_size=64, eval_samples=2, prompts_per_step=2, num_generations=4,
                 max_completion_length=16, max_steps=2, eval_every=1)


def result_path(results_dir: str, arm: str, seed: int) -> str:
    return os.path.join(results_dir, f"{arm}-seed{seed}.json")


def build_task(settings: Settings):
    """The example's held-out set, and its training source without the held-out questions."""
    from trl_variants.real.run import make_held_out, make_training_source

    held_out = make_held_out(prompts=settings.held_out_prompts)
    return held_out, make_training_source(held_out, size=settings.train_size, seed=settings.train_seed)


def shared_config(settings: Settings, seed: int, checkpoint: bool) -> dict:
    import torch

    on_gpu = torch.cuda.is_available()
    return dict(
        use_cpu=not on_gpu, bf16=False,  # float32 everywhere: the CPU example's arithmetic, and no autocast on CPU
        per_device_train_batch_size=settings.prompts_per_step * settings.num_generations,
        num_generations=settings.num_generations, max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        max_steps=settings.max_steps, logging_steps=1, report_to=[], disable_tqdm=True, seed=seed,
        save_strategy="steps" if checkpoint else "no", save_steps=settings.eval_every, save_total_limit=1,
    )  # fmt: skip


LOGGED = ("reward", "completions/mean_length", "completions/clipped_ratio", "dynamic_sampling/rounds",
          "dynamic_sampling/kept_groups", "dynamic_sampling/filled", "dynamic_sampling/carried_groups",
          "dynamic_sampling/skipped_prompts")  # fmt: skip


def run(arm: str, seed: int, settings: Settings, results_dir: str, checkpoint: bool, deadline: float | None,
        threads: int) -> dict:
    """Trains one arm of one seed, evaluating and writing its result file every `eval_every` steps."""
    import torch
    from transformers import logging as transformers_logging

    from benchmarks.real_model.real_model_recorder import Recorder, latest_checkpoint, read_result
    from benchmarks.shared.outcome_probe import OutcomeProbe
    from benchmarks.shared.policy import quiet
    from trl_variants.machine import describe_machine
    from trl_variants.real.run import DEFAULT_TASK, DEFAULT_TASK_CONFIG, HELD_OUT_SEED
    from trl_variants.real.smollm2 import load_smollm2

    path = result_path(results_dir, arm, seed)
    previous = read_result(path)
    if previous and previous["complete"]:
        return previous
    torch.set_num_threads(threads)
    transformers_logging.set_verbosity_error()
    output_dir = os.path.join(results_dir, "runs", f"{arm}-seed{seed}")
    resume = latest_checkpoint(output_dir) if checkpoint and previous else None
    model, tokenizer = load_smollm2()
    held_out, train = build_task(settings)
    probe = OutcomeProbe(train.reward_func, settings.num_generations, passed=lambda reward: reward >= 1.0)
    trainer_class, config = arm_trainer_and_config(arm, output_dir, shared_config(settings, seed, checkpoint))
    header = {"arm": arm, "seed": seed, "settings": asdict(settings), "machine": describe_machine(),
              "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
              "task": DEFAULT_TASK, "task_config": DEFAULT_TASK_CONFIG, "held_out_seed": HELD_OUT_SEED,
              "train_prompts_after_exclusion": len(train.dataset), "excluded_from_training": train.excluded}
    recorder = Recorder(path, header, probe, held_out, tokenizer, settings, LOGGED, deadline,
                        previous=(previous, int(resume.rsplit("-", 1)[1])) if resume else None)
    trainer = trainer_class(model, [probe.reward_func], args=config, train_dataset=train.dataset,
                            processing_class=tokenizer, callbacks=[recorder])
    quiet(trainer)
    trainer.train(resume_from_checkpoint=resume)
    return recorder.finish()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "grid"):
        command = commands.add_parser(name)
        command.add_argument("--results_dir", default=RESULTS_DIR)
        command.add_argument("--steps", type=int, default=None, help=f"default {Settings.max_steps}")
        command.add_argument("--checkpoint", action="store_true", help="save a checkpoint at every evaluation and "
                             "resume an interrupted run from the last one")
        command.add_argument("--threads", type=int, default=1, help="torch threads per run")
        command.add_argument("--smoke", action="store_true", help="tiny settings that only check the script works")
    run_parser, grid_parser = commands.choices["run"], commands.choices["grid"]
    run_parser.add_argument("--arm", choices=list(ARMS), required=True)
    run_parser.add_argument("--seed", type=int, required=True)
    run_parser.add_argument("--deadline_unix", type=float, default=None)
    grid_parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    grid_parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    grid_parser.add_argument("--workers", type=int, default=2)
    grid_parser.add_argument("--deadline", type=float, default=None, help="seconds from now after which runs stop "
                             "at an evaluation instead of starting another stretch of steps")
    report_parser = commands.add_parser("report")
    report_parser.add_argument("--results_dir", default=RESULTS_DIR)
    report_parser.add_argument("--output", default=None, help="Markdown file for the tables (a PNG plot beside it)")
    cli = parser.parse_args(argv)

    if cli.command == "report":
        from benchmarks.real_model.real_model_report import report

        print(report(cli.results_dir, cli.output))
        return 0
    os.makedirs(cli.results_dir, exist_ok=True)
    if cli.command == "grid":
        from benchmarks.real_model.real_model_recorder import is_complete

        passthrough = ["--results_dir", cli.results_dir, "--threads", str(cli.threads)]
        passthrough += (["--steps", str(cli.steps)] if cli.steps else []) + (["--checkpoint"] if cli.checkpoint else [])
        passthrough += ["--smoke"] if cli.smoke else []
        run_grid(__spec__.name, cli.arms, cli.seeds, workers=cli.workers, log_dir=cli.results_dir,
                 extra_arguments=passthrough, deadline_seconds=cli.deadline, grace_s=DEADLINE_GRACE_S,
                 is_complete=lambda arm, seed: is_complete(result_path(cli.results_dir, arm, seed)))
        return 0
    settings = SMOKE if cli.smoke else Settings()
    if cli.steps:
        settings.max_steps = cli.steps
    record = run(cli.arm, cli.seed, settings, cli.results_dir, cli.checkpoint, cli.deadline_unix, cli.threads)
    print(f"{cli.arm} seed {cli.seed}: held-out pass rate {record['accuracy'][0]:.3f} -> {record['accuracy'][-1]:.3f} "
          f"at step {record['eval_steps'][-1]}, {record['eval_tokens'][-1]} generated tokens", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
