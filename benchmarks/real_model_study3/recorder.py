"""Study 3's per-run instrument: a trainer callback that evaluates an arm when its generated completion tokens pass
each budget (on the weights of the last generation-batch boundary, before the batch that passed it trains) and at
the fixed optimizer step, and writes the run's result file after every evaluation.

The budget check runs inside the reward function, after the `OutcomeProbe` has counted a generation round: the
reward is called once per round of every arm (dynamic sampling's rounds included), while the model still holds the
boundary's weights. Each evaluation point measures greedy accuracy (deciding) and a sampled pass rate with the
point's own generator seed (`point_seed`).

Clocks. `step_cpu_seconds[i]` is this process's CPU time in optimizer step i + 1 (generation, scoring, backward,
update) less the evaluations run inside it; checkpoint writes fall between steps and are not counted. With one
torch thread per run, CPU time is what a run costs whatever else the machine runs.
"""

import dataclasses
import functools
import time

from transformers import TrainerCallback

from benchmarks.real_model.real_model_recorder import write_result

from .budgets import budgets_due, check_budgets, run_complete
from .design import EVAL_SEED_BASE


class RunComplete(BaseException):
    """Raised from inside the reward function once a run has every evaluation it needs, so that the generation
    rounds and updates of a batch no evaluation reads are not spent. A `BaseException`, as `KeyboardInterrupt` is:
    no `except Exception` on the way out of the trainer may take it for an error."""


def point_seed(settings, kind: str, budget_index: int = 0) -> int:
    """The generator seed of an evaluation point: step 0, then each token budget in order, then the fixed step."""
    budgets = check_budgets(settings.token_budgets)
    if kind == "step0":
        return EVAL_SEED_BASE
    if kind == "budget":
        if not 0 <= budget_index < len(budgets):
            raise ValueError(f"point_seed: budget_index={budget_index}; the settings have {len(budgets)} budgets.")
        return EVAL_SEED_BASE + 1 + budget_index
    if kind == "fixed_step":
        return EVAL_SEED_BASE + 1 + len(budgets)
    raise ValueError(f"point_seed: kind={kind!r}; expected 'step0', 'budget' or 'fixed_step'.")


def max_visits(probe_per_step: dict) -> int:
    """The most groups generated for any one training problem over a run (the probe's `groups_of/<index>`)."""
    totals: dict[str, int] = {}
    for counts in probe_per_step.values():
        for key, value in counts.items():
            if key.startswith("groups_of/"):
                totals[key] = totals.get(key, 0) + value
    return max(totals.values(), default=0)


def truncate_to_checkpoint(record: dict, step: int) -> dict:
    """What `record` knew when its checkpoint at optimizer `step` (a generation-batch boundary) was written, for a
    run resumed from it: step 0, the fixed-step evaluations up to `step` (run at the end of their step, before its
    checkpoint), the budget evaluations read at boundaries before `step` (one read at `step` came during the next
    batch's generation, which the resumed run generates again), and per-step data up to it."""
    kept = [point for point in record["evaluations"]
            if (point["kind"] == "fixed_step" and point["step"] <= step)
            or (point["kind"] == "budget" and point["step"] < step)]
    return {**record, "complete": False, "evaluations": kept, "step_cpu_seconds": record["step_cpu_seconds"][:step],
            "step_seconds": record["step_seconds"][:step],
            "probe": {at: counts for at, counts in record["probe"].items() if int(at) < step},
            "logged": {key: {at: value for at, value in values.items() if int(at) <= step}
                       for key, values in record["logged"].items()}}


class BudgetRecorder(TrainerCallback):
    """Evaluates at each token budget and at `settings.fixed_step` (step 0 is the grid's one shared measurement,
    `step0` in study.py, stored apart); records each evaluation's tokens at its boundary, the tokens generated when
    it was triggered, the training CPU time so far and the evaluation's CPU time, plus chosen logged metrics per step and
    the probe's counts. `evaluate(model, seed, greedy)` returns a `PassRate`. `attempt`: who trains this sitting of
    the run (commit, machine, start, load, the step it resumed from), appended to `record["attempts"]`. `previous`:
    the record of an interrupted run, already cut to its checkpoint by `truncate_to_checkpoint`."""

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

    def budgets_evaluated(self) -> int:
        return sum(point["kind"] == "budget" for point in self.record["evaluations"])

    def after_generation(self, step: int) -> None:
        at_boundary = self.tokens_before(step)
        generated = at_boundary + sum(counts["tokens"] for at, counts in self.probe.per_step.items() if at >= step)
        for budget in budgets_due(self.budgets, self.budgets_evaluated(), at_boundary, generated):
            index = self.budgets.index(budget)
            self._evaluate("budget", step, point_seed(self.settings, "budget", index), budget=budget,
                           tokens=at_boundary, tokens_generated=generated)
        if self._complete(step):
            raise RunComplete

    def _complete(self, step: int) -> bool:
        fixed = self.settings.fixed_step
        return run_complete(self.budgets, self.budgets_evaluated(), step, 0 if fixed is None else fixed) and (
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
        sampled = self.evaluate(self.model, seed, greedy=False)
        sampled_cpu = time.process_time() - sampled_started
        self._evaluation_cpu_in_step += time.process_time() - started
        self.record["evaluations"].append({
            "kind": kind, "step": step, **point, "seed": seed, "train_cpu_seconds": round(self.train_cpu(), 2),
            "greedy": dataclasses.asdict(greedy), "sampled": dataclasses.asdict(sampled),
            "greedy_cpu_seconds": round(greedy_cpu, 2), "sampled_cpu_seconds": round(sampled_cpu, 2),
        })  # fmt: skip
        self._write()

    def train_cpu(self) -> float:
        return sum(self.record["step_cpu_seconds"])

    # Training clock: optimizer steps only, evaluations inside them excluded.

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
            self._evaluate("fixed_step", step, point_seed(self.settings, "fixed_step"),
                           tokens=self.tokens_before(step))
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

