"""The per-run instrument of the real-model benchmark: a trainer callback that evaluates the held-out pass rate every
`eval_every` optimizer steps and writes the run's result file after each evaluation.

A run's clocks count optimizer steps only (generation, scoring, backward, update), never the evaluations:
`train_seconds` in wall time and `train_cpu_seconds` in this process's CPU time. On a machine shared with other
work the CPU time is the steadier measure of what a run cost (other processes stretch wall time, not it); with one
torch thread per run the two agree on an idle machine.
"""

import glob
import json
import os
import time

import torch
from transformers import TrainerCallback

from trl_variants.real.evaluation import sampled_pass_rate

# Every arm evaluates with the same generator seed at the same evaluation index, so sampling noise is shared between
# arms at a given point (common random numbers) and their paired differences are less noisy.
EVAL_SEED_BASE = 10_000
# How much longer than its estimate a stretch of steps and its evaluation may take before the deadline is at risk.
DEADLINE_MARGIN = 1.25
# One value per evaluation.
EVAL_SERIES = ("eval_steps", "accuracy", "always_right", "always_wrong", "eval_mean_length", "eval_truncated",
               "eval_tokens", "eval_completions", "train_seconds", "train_cpu_seconds", "eval_per_prompt")


def held_out_pass_rate(model, tokenizer, held_out, settings, index: int):
    """The `index`-th held-out evaluation of a run (a `PassRate`): its generator seed depends on `index` only. A GPU
    evaluates every sample in one batch; a CPU in batches of 64, which keeps memory flat."""
    samples = len(held_out.dataset) * settings.eval_samples
    return sampled_pass_rate(model, tokenizer, held_out, samples_per_prompt=settings.eval_samples,
                             max_new_tokens=settings.max_completion_length,
                             batch_size=samples if torch.cuda.is_available() else 64, seed=EVAL_SEED_BASE + index)


def read_result(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def is_complete(path: str) -> bool:
    """Whether the result file at `path` holds a whole run (a grid starts no process for it)."""
    record = read_result(path)
    return bool(record and record["complete"])


def write_result(path: str, record: dict) -> None:
    # Written under a temporary name and renamed, so a run killed mid-write leaves the previous record whole.
    staging = f"{path}.tmp"
    with open(staging, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(staging, path)


def latest_checkpoint(output_dir: str) -> str | None:
    checkpoints = glob.glob(os.path.join(output_dir, "checkpoint-*"))
    return max(checkpoints, key=lambda path: int(path.rsplit("-", 1)[1])) if checkpoints else None


def slowest_stretch_seconds(step_seconds: list[float], steps_per_stretch: int) -> float:
    """The longest that `steps_per_stretch` consecutive steps have taken so far (scaled up while fewer have run).

    The slowest stretch rather than the last: dynamic sampling's stretches differ by a factor of two or more as the
    share of degenerate groups changes, and a stretch that runs past the deadline is killed with its steps lost."""
    if not step_seconds:
        raise ValueError("slowest_stretch_seconds needs at least one step's time; step_seconds is empty.")
    if steps_per_stretch < 1:
        raise ValueError(f"steps_per_stretch must be at least 1, got {steps_per_stretch}.")
    windows = [step_seconds[start : start + steps_per_stretch]
               for start in range(max(1, len(step_seconds) - steps_per_stretch + 1))]
    return max(sum(window) / len(window) for window in windows) * steps_per_stretch


def would_end_past(deadline: float, now: float, estimated_seconds: float) -> bool:
    """Whether work estimated at `estimated_seconds`, started `now`, could end after `deadline`.

    The estimate is scaled by `DEADLINE_MARGIN`: the next stretch can be slower than any so far (another process
    starts on the same cores), and a run whose estimate ends just before the deadline would otherwise depend on the
    grid's short grace period to finish its evaluation."""
    if estimated_seconds < 0:
        raise ValueError(f"estimated_seconds must be at least 0, got {estimated_seconds}.")
    return now + DEADLINE_MARGIN * estimated_seconds > deadline


class Recorder(TrainerCallback):
    """Evaluates before the first step, every `settings.eval_every` steps and after the last; records generated
    tokens and groups (from the `OutcomeProbe` inside the reward), training seconds and chosen logged metrics.

    With `deadline` (a Unix time), training stops at an evaluation when the next evaluation would end after it,
    judged by the slowest stretch of steps so far.
    With `previous`, `(record, checkpoint step)` of an interrupted run resumed from a checkpoint, the series continue
    from that step.
    """

    def __init__(self, path, header, probe, held_out, tokenizer, settings, logged_keys, deadline=None, previous=None):
        self.path, self.probe, self.held_out, self.tokenizer = path, probe, held_out, tokenizer
        self.settings, self.logged_keys, self.deadline = settings, logged_keys, deadline
        self.record = {**header, "complete": False, **{key: [] for key in EVAL_SERIES}, "step_seconds": [],
                       "logged": {}}
        self.train_seconds = self.train_cpu_seconds = 0.0
        self._step_started = self._step_cpu_started = None
        if previous is not None:
            self._restore(*previous)

    def _restore(self, previous: dict, step: int) -> None:
        """Continues the record of a run resumed from its checkpoint at `step` (an evaluation step): what the
        interrupted run recorded after it is measured again."""
        count = sum(evaluated <= step for evaluated in previous["eval_steps"])
        self.record = {key: value[:count] if key in EVAL_SERIES else value for key, value in previous.items()}
        self.train_seconds = self.record["train_seconds"][-1]
        self.train_cpu_seconds = self.record["train_cpu_seconds"][-1]
        for generated_at, counts in previous["probe"].items():
            if int(generated_at) < step:
                self.probe.per_step[int(generated_at)].update(counts)
        self.record["step_seconds"] = previous["step_seconds"][:step]
        self.record["logged"] = {key: {logged_at: value for logged_at, value in values.items() if int(logged_at) <= step}
                                 for key, values in previous["logged"].items()}

    # Training clock: optimizer steps only.

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started, self._step_cpu_started = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        seconds = time.perf_counter() - self._step_started
        self.train_seconds += seconds
        self.train_cpu_seconds += time.process_time() - self._step_cpu_started
        self.record["step_seconds"].append(seconds)
        if state.global_step % self.settings.eval_every == 0 or state.global_step >= args.max_steps:
            self._evaluate(state, model)
            if state.global_step >= args.max_steps:
                self.record["complete"] = True
            elif self._past_deadline():
                self.record["stopped_at_deadline"] = True
                control.should_training_stop = True
            self._write(state)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.record["eval_steps"]:
            self._evaluate(state, model)
            self._write(state)

    def _past_deadline(self) -> bool:
        if self.deadline is None:
            return False
        stretch = slowest_stretch_seconds(self.record["step_seconds"], self.settings.eval_every)
        return would_end_past(self.deadline, time.time(), stretch + self.record["eval_seconds"])

    def _measure(self, index: int, model):
        """The `index`-th evaluation of `model`; a subclass may take it from elsewhere."""
        return held_out_pass_rate(model, self.tokenizer, self.held_out, self.settings, index)

    def _evaluate(self, state, model) -> None:
        result = self._measure(len(self.record["eval_steps"]), model)
        totals = self.probe.series(state.global_step + 1)
        record = self.record
        record["eval_steps"].append(state.global_step)
        record["accuracy"].append(result.pass_rate)
        record["always_right"].append(result.always_right)
        record["always_wrong"].append(result.always_wrong)
        record["eval_mean_length"].append(result.mean_completion_tokens)
        record["eval_truncated"].append(result.truncated_fraction)
        record["eval_per_prompt"].append(result.per_prompt)
        record["eval_tokens"].append(sum(totals["tokens"]))
        record["eval_completions"].append(sum(totals["completions"]))
        record["train_seconds"].append(round(self.train_seconds, 2))
        record["train_cpu_seconds"].append(round(self.train_cpu_seconds, 2))
        record["eval_seconds"] = result.seconds

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in self.logged_keys:
            if key in (logs or {}):
                self.record["logged"].setdefault(key, {})[str(state.global_step)] = logs[key]
        self._write(state)

    def _write(self, state) -> None:
        self.record["probe"] = {str(step): counts for step, counts in self.probe.per_step.items()}
        write_result(self.path, self.record)

    def finish(self) -> dict:
        return self.record
