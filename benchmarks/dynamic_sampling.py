"""What dynamic sampling costs on the toy task: generation rounds, generated groups and time per step.

    python benchmarks/dynamic_sampling.py [--steps 150] [--seed 0] [--smoke]

The toy policy is warm-started to a point where about half the prompt groups are informative (some completions
right, some wrong). The same DAPO run is then trained with and without dynamic sampling, from the same weights and
seed, in one process: each configuration trains in its own thread and the two take their optimizer steps strictly
in turn, so both see the same machine load over the whole run. A step is timed from its start to its end,
generation, scoring, log-prob passes, backward and optimizer update included.

Prints a Markdown table and writes it, with the command and the machine, to
docs/results/dynamic_sampling_benchmark.md (or `--output`; `--smoke` writes only when `--output` is given).
"""

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

import common  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "docs" / "results" / "dynamic_sampling_benchmark.md"
NUM_GENERATIONS = 4
BATCH_ROWS = 32  # 8 groups per step
BATCH_GROUPS = BATCH_ROWS // NUM_GENERATIONS
# After 200 supervised steps about half of the toy policy's groups of four sampled answers are mixed, some right
# and some wrong (0.54 at seed 0 before RL), which is the pass rate this benchmark is meant to measure at.
WARM_START_STEPS = 200


class TakeTurns:
    """Lets trainers running in threads take their optimizer steps strictly one after the other.

    A trainer holds the turn from the start of its step through its logging and the fetch of its next batch, and
    hands it on only at the start of its next step, so no two steps ever run at the same time and each
    configuration's steps are spread evenly over the run, under the same machine load.
    """

    def __init__(self, names: list[str]):
        self._names = list(names)
        self._finished: set[str] = set()
        self._current = self._names[0]
        self._condition = threading.Condition()
        self._all_started = threading.Barrier(len(names))

    def start(self, name: str) -> None:
        self._all_started.wait()
        self._wait(name)

    def next_step(self, name: str) -> None:
        with self._condition:
            self._pass_on(name)
        self._wait(name)

    def finish(self, name: str) -> None:
        self._all_started.abort()  # a trainer that failed before starting must not leave the others waiting
        with self._condition:
            self._finished.add(name)
            if self._current == name:
                self._pass_on(name)

    def _pass_on(self, name: str) -> None:
        position = self._names.index(name)
        for offset in range(1, len(self._names) + 1):
            candidate = self._names[(position + offset) % len(self._names)]
            if candidate not in self._finished:
                self._current = candidate
                break
        self._condition.notify_all()

    def _wait(self, name: str) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._current == name)


class TimedTurns(TrainerCallback):
    """Takes the turn before each optimizer step and times the step: wall time and this thread's CPU time
    (with one torch thread, the model's compute runs on the calling thread)."""

    def __init__(self, name: str, turns: TakeTurns):
        self.name, self.turns = name, turns
        self.wall_times: list[float] = []
        self.cpu_times: list[float] = []
        self._wall = self._cpu = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.turns.start(self.name)

    def on_step_begin(self, args, state, control, **kwargs):
        self.turns.next_step(self.name)
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.wall_times.append(time.perf_counter() - self._wall)
        self.cpu_times.append(time.thread_time() - self._cpu)


@dataclass
class RunTotals:
    """What one configuration's run measured."""

    wall_times: list[float] = field(default_factory=list)
    cpu_times: list[float] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)
    generated_groups: list[float] = field(default_factory=list)
    pass_rates: list[float] = field(default_factory=list)
    filled: list[float] = field(default_factory=list)
    zero_std_fractions: list[float] = field(default_factory=list)
    trained_groups: int = 0


def build_trainer(task, dynamic_sampling: bool, steps: int, seed: int, output_dir: Path, timer: TimedTurns):
    settings = common.TaskSettings(
        batch_size=BATCH_ROWS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=6,
        learning_rate=1e-3,
        max_steps=steps,
    )
    shared = common.training_kwargs(settings, seed, use_vllm=False)
    config = DAPOConfig(str(output_dir), dynamic_sampling=dynamic_sampling, **shared)
    policy = common.Policy(task=task, model=task.model, tokenizer=task.tokenizer)
    return common.build_trainer(DAPOTrainer, config, policy, callbacks=[timer])


def collect(trainer, timer: TimedTurns, steps: int) -> RunTotals:
    totals = RunTotals(wall_times=timer.wall_times, cpu_times=timer.cpu_times, trained_groups=steps * BATCH_GROUPS)
    for entry in trainer.state.log_history:
        if "frac_reward_zero_std" in entry:
            totals.zero_std_fractions.append(entry["frac_reward_zero_std"])
        if "dynamic_sampling/rounds" in entry:
            totals.rounds.append(entry["dynamic_sampling/rounds"])
            totals.generated_groups.append(entry["dynamic_sampling/generated_groups"])
            totals.pass_rates.append(entry["dynamic_sampling/pass_rate"])
            totals.filled.append(entry["dynamic_sampling/filled"])
    return totals


def run_benchmark(steps: int, seed: int, warm_start_steps: int, work_dir: Path) -> dict[bool, RunTotals]:
    """Trains both configurations from the same warm-started weights and seed, their steps interleaved."""
    task = make_toy_task(seed=seed, warm_start_steps=warm_start_steps)
    names = {True: "dynamic", False: "plain"}
    turns = TakeTurns([names[True], names[False]])
    timers = {ds: TimedTurns(names[ds], turns) for ds in names}
    trainers = {ds: build_trainer(task, ds, steps, seed, work_dir / names[ds], timers[ds]) for ds in names}
    failures: list[BaseException] = []

    def train(dynamic_sampling: bool) -> None:
        try:
            trainers[dynamic_sampling].train()
        except BaseException as error:  # re-raised in the main thread below
            failures.append(error)
        finally:
            turns.finish(names[dynamic_sampling])

    threads = [threading.Thread(target=train, args=(ds,), name=names[ds]) for ds in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return {ds: collect(trainers[ds], timers[ds], steps) for ds in names}


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "n/a"


def results_table(totals: dict[bool, RunTotals]) -> str:
    dynamic, plain = totals[True], totals[False]
    rounds = statistics.mean(dynamic.rounds)
    generated_per_trained = sum(dynamic.generated_groups) / dynamic.trained_groups
    dynamic_informative = 1 - statistics.mean(dynamic.zero_std_fractions)
    plain_informative = 1 - statistics.mean(plain.zero_std_fractions)
    rows = [
        ("steps measured", f"{len(dynamic.wall_times)}", f"{len(plain.wall_times)}", ""),
        ("mean generation rounds per step", f"{rounds:.2f}", "1.00", ratio(rounds, 1.0)),
        ("steps needing more than one round", f"{statistics.mean(r > 1 for r in dynamic.rounds):.0%}", "0%", ""),
        (
            "generated groups per trained group",
            f"{generated_per_trained:.2f}",
            "1.00",
            ratio(generated_per_trained, 1.0),
        ),
        ("pass rate (informative / generated groups)", f"{statistics.mean(dynamic.pass_rates):.2f}", "", ""),
        ("steps filled with degenerate groups", f"{statistics.mean(dynamic.filled):.0%}", "", ""),
        (
            "informative share of the trained batch",
            f"{dynamic_informative:.2f}",
            f"{plain_informative:.2f}",
            ratio(dynamic_informative, plain_informative),
        ),
    ]
    for label, measure in (("wall time", "wall_times"), ("CPU time", "cpu_times")):
        for statistic, function in (("mean", statistics.mean), ("median", statistics.median)):
            with_ds, without_ds = function(getattr(dynamic, measure)), function(getattr(plain, measure))
            name = f"{label} per step, {statistic} (s)"
            rows.append((name, f"{with_ds:.3f}", f"{without_ds:.3f}", ratio(with_ds, without_ds)))
    lines = [
        "| quantity | dynamic sampling | no dynamic sampling | ratio |",
        "|---|---|---|---|",
        *(f"| {name} | {with_ds} | {without_ds} | {value} |" for name, with_ds, without_ds, value in rows),
    ]
    return "\n".join(lines)


def report(table: str, command: str, args: argparse.Namespace) -> str:
    return f"""# Dynamic sampling benchmark

Measured by `benchmarks/dynamic_sampling.py` on the embedded toy task: one-digit addition, a tiny Qwen2 policy
warm-started for {args.warm_start_steps} supervised steps, the accuracy reward (+1/-1), {BATCH_GROUPS} groups of
{NUM_GENERATIONS} completions per optimizer step, {args.steps} steps per configuration, seed {args.seed}. Both
configurations start from the same weights and train in one process, taking their steps strictly in turn, so
both see the same machine load; the ratios compare the two under identical conditions.

{table}

How to read it:

- *mean generation rounds per step*: generation rounds needed to fill a step's batch with informative groups, the
  first included (target: at most 1.5).
- *generated groups per trained group*: groups generated and scored for each group that reached the loss.
- *informative share of the trained batch*: 1 - TRL's `frac_reward_zero_std`. Without dynamic sampling the
  degenerate groups stay in the batch with zero advantage.
- *wall time / CPU time per step*: from the start to the end of an optimizer step (generation, scoring, log-prob
  passes, backward, optimizer update). Only generation and reward scoring grow with the number of generated
  groups; the forward and backward passes stay at the trained batch. CPU time is the stepping thread's (torch
  runs on {torch.get_num_threads()} thread(s)), which other work on the machine does not inflate. The toy model
  generates a few tokens per completion, so a generation round costs little more for more rows and time grows far
  less than the generated groups; with a large model, generation dominates a step and time grows closer to in
  proportion to the generated groups.

Command: `{command}`

Machine: {os.cpu_count()} CPUs ({common.cpu_model()}); Python {platform.python_version()}, torch {torch.__version__},
transformers {transformers.__version__}, trl {trl.__version__}.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per configuration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-start-steps", type=int, default=WARM_START_STEPS)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 makes CPU time per step exact)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that only checks the script works")
    parser.add_argument("--output", type=Path, default=None, help=f"report path (default {DEFAULT_OUTPUT})")
    parser.add_argument("--work-dir", type=Path, default=None, help="trainer output dirs (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.warm_start_steps = 3, 20
    for name in ("steps", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as temporary:
        work_dir = args.work_dir or Path(temporary)
        totals = run_benchmark(args.steps, args.seed, args.warm_start_steps, work_dir)
    table = results_table(totals)
    print(table)

    output = args.output if args.output is not None or args.smoke else DEFAULT_OUTPUT
    if output is not None:
        command = shlex.join(["python", "benchmarks/dynamic_sampling.py", *(sys.argv[1:] if argv is None else argv)])
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(report(table, command, args))
        print(f"\nwritten to {output}")


if __name__ == "__main__":
    main()
