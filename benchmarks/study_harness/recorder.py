"""The per-run instrument and its result file: a trainer callback that reads an arm on both sides of each token
budget (budgets.py) and after the fixed optimizer step, and writes the run's result file after every evaluation.

The budget check runs inside the reward function, after the `OutcomeProbe` has counted a generation round: the
reward is called once per round of every arm (dynamic sampling's rounds included), while the model still holds the
boundary's weights. Each evaluation point measures greedy accuracy and, where `settings.sampled_budgets` says
(`budgets.measures_sampled`; else `"sampled": null`), a sampled pass rate, with the point's own generator seed.
`step_cpu_seconds[i]` is this process's CPU time in optimizer step i + 1 less the evaluations run inside it; with one
torch thread per run, CPU time is what a run costs whatever else the machine runs.
"""

import dataclasses
import functools
import glob
import json
import os
import time

from transformers import TrainerCallback

from .budgets import budgets_read, check_budgets, measures_sampled, point_seed, readings_due


def read_result(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write_result(path: str, record: dict) -> None:
    staging = f"{path}.tmp"  # renamed into place, so a run killed mid-write leaves the previous record whole
    with open(staging, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(staging, path)


def is_complete(path: str) -> bool:
    record = read_result(path)
    return bool(record and record["complete"])


def latest_checkpoint(output_dir: str) -> str | None:
    checkpoints = glob.glob(os.path.join(output_dir, "checkpoint-*"))
    return max(checkpoints, key=lambda path: int(path.rsplit("-", 1)[1])) if checkpoints else None


class RunComplete(BaseException):
    """Raised from inside the reward function once a run has every evaluation it needs, so that a batch no
    evaluation reads is not spent; a `BaseException`, so no `except Exception` on the way out takes it for an error."""


def max_visits(probe_per_step: dict) -> int:
    """The most groups generated for any one training problem over a run (the probe's `groups_of/<index>`)."""
    totals: dict[str, int] = {}
    for counts in probe_per_step.values():
        for key, value in counts.items():
            if key.startswith("groups_of/"):
                totals[key] = totals.get(key, 0) + value
    return max(totals.values(), default=0)


def truncate_to_checkpoint(record: dict, step: int) -> dict:
    """What `record` knew when its checkpoint at optimizer `step` (a generation-batch boundary) was written: the
    fixed-step evaluations up to `step`, the budget readings taken at boundaries before `step` (one taken at `step`
    came during the next batch's generation, which the resumed run generates again), and per-step data up to it."""
    kept = [point for point in record["evaluations"]
            if (point["kind"] == "fixed_step" and point["step"] <= step)
            or (point["kind"] == "budget" and point["step"] < step)]
    return {**record, "complete": False, "evaluations": kept, "step_cpu_seconds": record["step_cpu_seconds"][:step],
            "step_seconds": record["step_seconds"][:step],
            "probe": {at: counts for at, counts in record["probe"].items() if int(at) < step},
            "logged": {key: {at: value for at, value in values.items() if int(at) <= step}
                       for key, values in record["logged"].items()}}


class BudgetRecorder(TrainerCallback):
    """Reads the run at each token budget (both sides) and after `settings.fixed_step`; records per reading its
    boundary's tokens and step, the tokens generated when it was triggered, the training CPU time so far and the
    evaluation's CPU time, plus `logged_keys` per step and the probe's counts. `evaluate(model, seed, greedy)` returns
    a `PassRate`. `attempt` (commit, start, load, the step resumed from) is appended to `record["attempts"]`;
    `previous` is an interrupted run's record, already cut by `truncate_to_checkpoint`."""

    def __init__(self, path, header, attempt, probe, settings, logged_keys, evaluate, previous=None):
        self.path, self.probe, self.settings, self.logged_keys = path, probe, settings, logged_keys
        self.evaluate = evaluate
        self.budgets = check_budgets(settings.token_budgets)
        self.model = None
        self._greedy_at: tuple[int, object] | None = None  # greedy decoding of one boundary's weights, reused
        self._step_cpu_started = self._step_started = None
        self._evaluation_cpu_in_step = 0.0
        if previous is None:
            self.record = {**header, "complete": False, "evaluations": [], "step_cpu_seconds": [], "step_seconds": [],
                           "probe": {}, "logged": {}, "attempts": []}
        else:
            self.record = {**previous, **header}
            for generated_at, counts in previous["probe"].items():
                self.probe.per_step[int(generated_at)].update(counts)
        self.record["attempts"] = [*self.record["attempts"], attempt]

    def wrap_reward(self, reward_func):
        """`reward_func` (the probe's), followed by the budget check on what has been generated so far."""

        @functools.wraps(reward_func)
        def rewarded(*args, **kwargs):
            rewards = reward_func(*args, **kwargs)
            state = kwargs.get("trainer_state")
            self.after_generation(state.global_step if state is not None else 0)
            return rewards

        return rewarded

    def tokens_before(self, step: int) -> int:
        return sum(counts["tokens"] for at, counts in self.probe.per_step.items() if at < step)

    def after_generation(self, step: int) -> None:
        at_boundary = self.tokens_before(step)
        generated = at_boundary + sum(counts["tokens"] for at, counts in self.probe.per_step.items() if at >= step)
        read: dict = {}
        for point in self.record["evaluations"]:
            if point["kind"] == "budget":
                read.setdefault(point["budget"], {})[point["side"]] = point["tokens"]
        for budget, side in readings_due(self.budgets, read, at_boundary, generated):
            self._evaluate("budget", step, point_seed(self.budgets, "budget", self.budgets.index(budget)),
                           budget=budget, side=side, tokens=at_boundary, tokens_generated=generated)
        if self._complete(step):
            raise RunComplete

    def _complete(self, step: int) -> bool:
        fixed = self.settings.fixed_step
        return budgets_read(self.budgets, [p for p in self.record["evaluations"] if p["kind"] == "budget"]) and (
            fixed is None or any(point["kind"] == "fixed_step" for point in self.record["evaluations"]))

    def _evaluate(self, kind: str, step: int, seed: int, **point) -> None:
        started = time.process_time()
        if self._greedy_at is not None and self._greedy_at[0] == step:
            greedy, greedy_cpu = self._greedy_at[1], 0.0
        else:
            greedy = self.evaluate(self.model, seed, greedy=True)
            greedy_cpu = time.process_time() - started
            self._greedy_at = (step, greedy)
        sampled_started = time.process_time()
        sampled = None
        if measures_sampled(self.budgets, self.settings.sampled_budgets, kind, point.get("budget")):
            sampled = self.evaluate(self.model, seed, greedy=False)
        sampled_cpu = time.process_time() - sampled_started
        self._evaluation_cpu_in_step += time.process_time() - started
        self.record["evaluations"].append({
            "kind": kind, "step": step, **point, "seed": seed, "train_cpu_seconds": round(self.train_cpu(), 2),
            "greedy": dataclasses.asdict(greedy), "sampled": sampled and dataclasses.asdict(sampled),
            "greedy_cpu_seconds": round(greedy_cpu, 2), "sampled_cpu_seconds": round(sampled_cpu, 2),
        })  # fmt: skip
        self._write()

    def train_cpu(self) -> float:
        return sum(self.record["step_cpu_seconds"])

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model = model
        self._write()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started, self._step_cpu_started = time.perf_counter(), time.process_time()
        self._evaluation_cpu_in_step = 0.0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.record["step_cpu_seconds"].append(
            round(time.process_time() - self._step_cpu_started - self._evaluation_cpu_in_step, 3))
        self.record["step_seconds"].append(round(time.perf_counter() - self._step_started, 3))
        step = state.global_step
        if step == self.settings.fixed_step:
            self._evaluate("fixed_step", step, point_seed(self.budgets, "fixed_step"), tokens=self.tokens_before(step))
        if self._complete(step):
            control.should_training_stop = True
        self._write()

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in self.logged_keys:
            if key in (logs or {}):
                self.record["logged"].setdefault(key, {})[str(state.global_step)] = logs[key]
        self._write()

    def finish(self) -> dict:
        self.record["complete"] = self._complete(len(self.record["step_cpu_seconds"]))
        self._write()
        return self.record

    def _write(self) -> None:
        self.record["probe"] = {str(step): counts for step, counts in sorted(self.probe.per_step.items())}
        self.record["max_visits"] = max_visits(self.record["probe"])
        write_result(self.path, self.record)
