"""Real-model speed: seconds per optimizer step and per informative trained row of SmolLM2-135M-Instruct on the
real-model example's task (trl_variants/real/run.py settings), for four trainer settings, generating with
transformers (`generate`) and with vLLM in colocate mode, and where a step's time goes.

Arms (the example's settings; only the algorithm's fields differ):
- `grpo`: TRL's `GRPOTrainer`;
- `dapo`: `DAPOTrainer` as published (dynamic sampling, overlong buffer of 8 tokens, skipping and carrying off);
- `dapo_skip_carry`: `DAPOTrainer` with `skip_degenerate_prompts=True` and `dynamic_sampling_carry_surplus=True`;
- `dr_grpo`: `DrGRPOTrainer`.

An informative trained row is a completion of a trained group whose rewards were not all equal (the rows that
carry a gradient): every row under dynamic sampling, `(1 - frac_reward_zero_std) * batch` without it.

Phases of a step: `generation` (every sampling call, refill rounds included), `rewards` (scoring),
`old/ref forward` (log-prob passes without gradient: the old policy's, needed for vLLM's importance sampling
correction, and a reference model's when `beta > 0`), `forward+backward` (the loss pass and its backward),
`weight sync` (vLLM only: the trainer's weights into the engine) and `other` (the optimizer step, TRL's batch
assembly, logging). vLLM runs in its own environment (scripts/install_vllm_cpu.sh); the driver starts it there and
merges both backends into one report.

    python -m benchmarks.real_model_speed.real_model_speed --vllm_python .venv-vllm-cpu/bin/python  # both backends
    python -m benchmarks.real_model_speed.real_model_speed --backends hf --smoke                    # a quick check

The report goes to benchmarks/real_model_speed/results (`--output_dir`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from benchmarks.shared.instruments import GenerationCounter, PhaseTimer, StepTimer
from benchmarks.shared.output import (
    command_line, load_average, machine_description, machine_markdown, markdown_table, write_json,
)  # fmt: skip
from benchmarks.shared.settings import DAPO_AS_PUBLISHED, REPO_ROOT, configure_runtime, configure_vllm
from trl_variants.real.run import make_held_out, make_training_source, variant_config
from trl_variants.real.smollm2 import load_smollm2
from trl_variants.variants import VARIANTS
from trl_variants.vllm_cpu import keep_linear_weights_reloadable

ARMS = {
    "grpo": ("grpo", {}, "TRL GRPOTrainer"),
    "dapo": ("dapo", DAPO_AS_PUBLISHED, "DAPOTrainer as published"),
    "dapo_skip_carry": (
        "dapo",
        {"skip_degenerate_prompts": True, "dynamic_sampling_carry_surplus": True},
        "DAPOTrainer, skipping + carrying",
    ),
    "dr_grpo": ("dr-grpo", {}, "DrGRPOTrainer"),
}
VLLM_SETTINGS = {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 192}
PHASES = ("generation", "rewards", "old/ref forward", "forward+backward", "weight sync", "other")
DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def instrument(trainer, timer: PhaseTimer) -> None:
    timer.wrap_method(trainer, "_generate_single_turn", "generation")
    timer.wrap_method(trainer, "_calculate_rewards", "rewards")
    # Log-prob passes: without gradient they are the old/reference forward; with it, part of the loss pass.
    timer.wrap_method(
        trainer,
        "_get_per_token_logps_and_entropies",
        lambda _: "old/ref forward" if not torch.is_grad_enabled() else "loss logps (inside forward+backward)",
    )
    timer.wrap_method(trainer, "training_step", "training_step")
    timer.wrap_method(trainer, "_prepare_inputs", "prepare_inputs")
    if getattr(trainer, "vllm_generation", None) is not None:
        timer.wrap_method(trainer.vllm_generation, "sync_weights", "weight sync")


def informative_rows(entry: dict, config) -> float:
    rows = config.per_device_train_batch_size * config.gradient_accumulation_steps
    if "dynamic_sampling/kept_groups" in entry:
        if entry.get("dynamic_sampling/filled", 0.0):
            return rows * (1.0 - entry.get("frac_reward_zero_std", 0.0))
        return entry["dynamic_sampling/kept_groups"] * config.num_generations
    return rows * (1.0 - entry.get("frac_reward_zero_std", 0.0))


class PhaseSnapshots(TrainerCallback):
    """The phase timer's totals at the end of every step, so per-step phase seconds can be taken as differences."""

    def __init__(self, timer: PhaseTimer, counter: GenerationCounter):
        self.timer, self.counter = timer, counter
        self.snapshots: list[dict] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.snapshots.append({**self.timer.seconds, "generated_tokens": self.counter.tokens})


def measure_arm(arm: str, backend: str, steps: int, warmup: int, seed: int, train) -> dict:
    """Trains `warmup + steps` steps of `arm` and summarises the steps after the warm-up."""
    variant, overrides, label = ARMS[arm]
    overrides = {**overrides, **(VLLM_SETTINGS if backend == "vllm" else {})}
    model, tokenizer = load_smollm2()
    with tempfile.TemporaryDirectory() as output_dir:
        config = variant_config(variant, output_dir, seed, warmup + steps, overrides)
        # TRL's own GRPOTrainer does not make vLLM's CPU engine keep reloadable weights; the package's trainers do.
        keep_linear_weights_reloadable(config)
        trainer = VARIANTS[variant].trainer_class(
            model, [train.reward_func], args=config, train_dataset=train.dataset, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)
        timer, step_timer = PhaseTimer(), StepTimer()
        instrument(trainer, timer)
        counter = GenerationCounter(trainer)
        snapshots = PhaseSnapshots(timer, counter)
        trainer.add_callback(step_timer)
        trainer.add_callback(snapshots)
        trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry][warmup:]
    kept = slice(warmup, warmup + steps)
    wall, cpu = step_timer.durations[kept], step_timer.cpu_durations[kept]
    start = snapshots.snapshots[warmup - 1] if warmup else {}
    end = snapshots.snapshots[-1]

    def spent(name):
        return end.get(name, 0.0) - start.get(name, 0.0)

    phases = {
        "generation": spent("generation"),
        "rewards": spent("rewards"),
        "old/ref forward": spent("old/ref forward"),
        "forward+backward": spent("training_step") - spent("prepare_inputs"),
        "weight sync": spent("weight sync"),
    }
    phases["other"] = sum(wall) - sum(phases.values())
    rows = sum(informative_rows(entry, config) for entry in logs)
    return {
        "arm": arm,
        "label": label,
        "backend": backend,
        "steps": len(wall),
        "seconds_per_step": statistics.mean(wall),
        "cpu_seconds_per_step": statistics.mean(cpu),
        "informative_rows_per_step": rows / len(wall),
        "seconds_per_informative_row": sum(wall) / rows if rows else None,
        "generated_tokens_per_step": (end["generated_tokens"] - start.get("generated_tokens", 0)) / len(wall),
        "phase_seconds_per_step": {name: value / len(wall) for name, value in phases.items()},
    }


def worker(cli) -> None:
    configure_runtime(cli.threads)
    configure_vllm(cli.backend == "vllm")
    held_out = make_held_out()
    train = make_training_source(held_out, seed=cli.seed)
    results = []
    for arm in cli.arms:
        print(f"[{cli.backend}] {arm}: {cli.warmup} warm-up + {cli.steps} measured steps", flush=True)
        results.append(measure_arm(arm, cli.backend, cli.steps, cli.warmup, cli.seed, train))
    write_json(results, cli.worker_output)


def report(results: list[dict], machine: dict, command: str) -> str:
    header = ["backend", "trainer", "s / step", "CPU s / step", "informative rows / step", "s / informative row",
              "generated tokens / step"]
    rows = [
        [r["backend"], r["label"], f"{r['seconds_per_step']:.1f}", f"{r['cpu_seconds_per_step']:.1f}",
         f"{r['informative_rows_per_step']:.1f}",
         "n/a" if r["seconds_per_informative_row"] is None else f"{r['seconds_per_informative_row']:.2f}",
         f"{r['generated_tokens_per_step']:.0f}"]
        for r in results
    ]
    phase_header = ["backend", "trainer", *(f"{name} (s)" for name in PHASES)]
    phase_rows = [
        [r["backend"], r["label"], *(f"{r['phase_seconds_per_step'][name]:.1f}" for name in PHASES)]
        for r in results
    ]
    return (
        "# Real-model speed: SmolLM2-135M-Instruct on reasoning-gym basic_arithmetic\n\n"
        f"Command: `{command}`\n\n{machine_markdown(machine)}\n\n"
        f"{markdown_table(header, rows)}\n\nWhere a step's time goes (seconds per step):\n\n"
        f"{markdown_table(phase_header, phase_rows)}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    parser.add_argument("--vllm_python", default=os.path.join(REPO_ROOT, ".venv-vllm-cpu", "bin", "python"))
    parser.add_argument("--steps", type=int, default=5, help="measured steps per arm (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps per arm, not measured (default 1)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_dir", default=DEFAULT_OUTPUT)
    parser.add_argument("--smoke", action="store_true", help="1 warm-up + 1 measured step per arm")
    parser.add_argument("--backend", choices=["hf", "vllm"], help=argparse.SUPPRESS)  # worker mode
    parser.add_argument("--worker_output", help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.smoke:
        cli.steps, cli.warmup = 1, 1
    if cli.backend:
        worker(cli)
        return
    os.makedirs(cli.output_dir, exist_ok=True)
    load_at_start = load_average()
    started = time.perf_counter()
    results = []
    for backend in cli.backends:
        python = sys.executable if backend == "hf" else cli.vllm_python
        with tempfile.NamedTemporaryFile(suffix=".json") as output:
            command = [python, "-m", __spec__.name, "--backend", backend, "--worker_output", output.name,
                       "--steps", str(cli.steps), "--warmup", str(cli.warmup), "--threads", str(cli.threads),
                       "--seed", str(cli.seed), "--arms", *cli.arms]
            paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
            environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
            subprocess.run(command, check=True, cwd=REPO_ROOT, env=environment)
            with open(output.name, encoding="utf-8") as written:
                results += json.load(written)
    machine = machine_description(cli.threads, load_at_start)
    machine["load average at end"] = load_average()
    machine["wall time"] = f"{time.perf_counter() - started:.0f} s"
    invocation = command_line(__spec__.name)
    write_json({"machine": machine, "results": results}, os.path.join(cli.output_dir, "real_model_speed.json"))
    text = report(results, machine, invocation)
    with open(os.path.join(cli.output_dir, "real_model_speed.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
