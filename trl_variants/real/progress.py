"""Progress lines for the real-model example: one per training step and one per evaluation batch, each with the time
elapsed and an estimate of the time left, and, inside a step that lasts, a line every half minute with what it is
doing. A step of the 135M-parameter model takes from half a minute on an idle 2-core CPU to several minutes on a
busy one, so a bar that moves once a step says less than a line that stays."""

import threading
import time
from dataclasses import dataclass

from transformers import TrainerCallback

from ..dynamic_sampling.reward_metric import ALL_GROUPS_REWARD_METRIC
from ..dynamic_sampling.trl_hooks import observe_calls

TRAIN_SUMMARY_KEY = "train_runtime"


def clock(seconds: float) -> str:
    """`seconds` as `M:SS`, or as `H:MM:SS` from an hour on."""
    hours, rest = divmod(max(0, round(seconds)), 3600)
    minutes, rest = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{rest:02d}" if hours else f"{minutes}:{rest:02d}"


def progress_line(label: str, done: int, total: int, elapsed: float, done_at_start: int = 0, details: str = "") -> str:
    """`  LABEL DONE/TOTAL DETAILS: ELAPSED elapsed, about LEFT left`.

    The time left extrapolates the pace of the units done since `done_at_start` over the `total - done` units still
    to do; units an earlier sitting finished (a resumed run) took no time in this one, so they do not count.
    """
    finished = done - done_at_start
    if done >= total:
        left = ", done"
    elif finished > 0:
        left = f", about {clock(elapsed / finished * (total - done))} left"
    else:
        left = ""
    return f"  {label} {done}/{total}{details}: {clock(elapsed)} elapsed{left}"


def evaluation_progress(report, label: str):
    """A `progress` function for `sampled_pass_rate` that reports `label` with the samples done, from now on."""
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        report(progress_line(label, done, total, time.perf_counter() - started, details=" samples"))

    return progress


class StepProgress(TrainerCallback):
    """Reports a line per logged training step: the step, the training reward (over every generated group under
    dynamic sampling, TRL's `reward` otherwise), the time this sitting has trained and an estimate of the time
    left. With `checkpoints` (a checkpoint after every step), the line waits until the step's checkpoint is
    written, so that a step the screen calls done survives an interrupt; a checkpoint that takes more than
    `saving_notice_after` seconds is announced."""

    def __init__(self, report, checkpoints: bool = False, saving_notice_after: float = 2.0):
        self.report = report
        self.checkpoints, self.saving_notice_after = checkpoints, saving_notice_after
        self.started = time.perf_counter()
        self.first_step = 0
        self.pending_line: str | None = None
        self.saving_notice: threading.Timer | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        # After a resume, `global_step` is already the checkpoint's step here.
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or TRAIN_SUMMARY_KEY in logs or not state.is_world_process_zero:
            return
        reward = logs.get(ALL_GROUPS_REWARD_METRIC, logs.get("reward"))
        details = "" if reward is None else f" (reward {reward:.2f})"
        elapsed = time.perf_counter() - self.started
        line = progress_line("step", state.global_step, state.max_steps, elapsed, self.first_step, details)
        if not self.checkpoints:
            self.report(line)
            return
        # transformers saves right after logging the step; `on_save` comes once the checkpoint is complete.
        self.pending_line = line
        notice = f"  saving the checkpoint of step {state.global_step}..."
        self.saving_notice = threading.Timer(self.saving_notice_after, self.report, [notice])
        self.saving_notice.daemon = True
        self.saving_notice.start()

    def on_save(self, args, state, control, **kwargs):
        self._stop_notice()
        if self.pending_line is not None:
            self.report(self.pending_line)
            self.pending_line = None

    def on_train_end(self, args, state, control, **kwargs):
        self._stop_notice()

    def _stop_notice(self) -> None:
        if self.saving_notice is not None:
            self.saving_notice.cancel()
            self.saving_notice = None


@dataclass
class StepActivity:
    """What the current training step has done so far."""

    phase: str = "starting"
    rounds: int = 0
    completions: int = 0


def activity_line(step: int, max_steps: int, activity: StepActivity, elapsed: float) -> str:
    """`  step N/M in progress for M:SS: R generation round(s) done, C completions generated; now PHASE`."""
    rounds = f"{activity.rounds} generation round{'' if activity.rounds == 1 else 's'} done"
    return (f"  step {step}/{max_steps} in progress for {clock(elapsed)}: {rounds}, {activity.completions} "
            f"completions generated; now {activity.phase}")  # fmt: skip


GENERATING, SCORING, TRAINING = "generating completions", "scoring completions", "computing the loss and gradients"


class StepHeartbeat(TrainerCallback):
    """Inside a training step that lasts more than `every` seconds, reports every `every` seconds the generation
    rounds done, the completions generated and the phase (`activity_line`). `watch(trainer)` follows the trainer's
    generation calls, dynamic sampling's rounds and its loss computation; `finished` keeps each step's last
    activity."""

    def __init__(self, report, every: float = 30.0):
        self.report, self.every = report, every
        self.activity = StepActivity()
        self.finished: list[StepActivity] = []
        self._stop: threading.Event | None = None

    def watch(self, trainer) -> None:
        """Follows `trainer`'s work through its instance: TRL's `_generate_single_turn` (one call per generation,
        every row a completion), dynamic sampling's `_settle_round` (once per round, where the trainer has it) and
        `compute_loss`."""
        counts_rounds = hasattr(trainer, "_settle_round")

        def following_generation(generate):
            def generate_single_turn(prompt_ids, *args, **kwargs):
                self.activity.phase = GENERATING
                outputs = generate(prompt_ids, *args, **kwargs)
                self.activity.completions += len(prompt_ids)
                self.activity.rounds += 0 if counts_rounds else 1
                self.activity.phase = SCORING
                return outputs

            return generate_single_turn

        def following_loss(compute_loss):
            def loss(*args, **kwargs):
                self.activity.phase = TRAINING
                return compute_loss(*args, **kwargs)

            return loss

        def following_rounds(settle_round):
            def settle(*args, **kwargs):
                result = settle_round(*args, **kwargs)
                self.activity.rounds += 1
                return result

            return settle

        observe_calls(trainer, "_generate_single_turn", following_generation)
        observe_calls(trainer, "compute_loss", following_loss)
        if counts_rounds:
            observe_calls(trainer, "_settle_round", following_rounds)

    def on_step_begin(self, args, state, control, **kwargs):
        self._stop_beats()
        self.activity = StepActivity()
        if not state.is_world_process_zero:
            return
        stop, started = threading.Event(), time.perf_counter()
        step, max_steps = state.global_step + 1, state.max_steps

        def beat():
            while not stop.wait(self.every):
                self.report(activity_line(step, max_steps, self.activity, time.perf_counter() - started))

        self._stop = stop
        threading.Thread(target=beat, daemon=True).start()

    def on_step_end(self, args, state, control, **kwargs):
        self._stop_beats()
        self.finished.append(self.activity)

    def on_train_end(self, args, state, control, **kwargs):
        self._stop_beats()

    def _stop_beats(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None
