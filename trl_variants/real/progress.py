"""Progress lines for the real-model example: one per training step and one per evaluation batch, each with the time
elapsed and an estimate of the time left. A step of the 135M-parameter model takes from half a minute on an idle
2-core CPU to several minutes on a busy one, so a bar that moves once a step says less than a line that stays."""

import time

from transformers import TrainerCallback

from ..dynamic_sampling.reward_metric import ALL_GROUPS_REWARD_METRIC

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
    left."""

    def __init__(self, report):
        self.report = report
        self.started = time.perf_counter()
        self.first_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        # After a resume, `global_step` is already the checkpoint's step here.
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or TRAIN_SUMMARY_KEY in logs or not state.is_world_process_zero:
            return
        reward = logs.get(ALL_GROUPS_REWARD_METRIC, logs.get("reward"))
        details = "" if reward is None else f" (reward {reward:.2f})"
        elapsed = time.perf_counter() - self.started
        self.report(progress_line("step", state.global_step, state.max_steps, elapsed, self.first_step, details))
