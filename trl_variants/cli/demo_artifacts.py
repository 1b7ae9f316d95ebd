"""What the demo records while it trains: held-out accuracy during training, the JSONL training log, a progress bar,
and the reward/accuracy plot drawn from the log."""

import json
from pathlib import Path

from tqdm.auto import tqdm
from transformers import TrainerCallback

from ..log_records import step_record

HELD_OUT_KEY = "held_out_accuracy"
TRAIN_SUMMARY_KEY = "train_runtime"


class HeldOutAccuracyCallback(TrainerCallback):
    """Measures greedy accuracy on the held-out prompts every `every` steps and on the last step, and adds it to
    that step's logs as `held_out_accuracy`, so the log and the plot show the policy improving during training."""

    def __init__(self, measure, every: int):
        self.measure = measure
        self.every = max(1, every)
        self.pending: float | None = None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.pending = self.measure(model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending is not None and logs is not None and TRAIN_SUMMARY_KEY not in logs:
            logs[HELD_OUT_KEY] = self.pending
            self.pending = None


class JsonlLogCallback(TrainerCallback):
    """Appends one JSON line per logged training step to `path` (the end-of-training summary is not a step)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or TRAIN_SUMMARY_KEY in logs or not state.is_world_process_zero:
            return
        record = step_record(state.global_step, logs)
        self.records.append(record)
        with self.path.open("a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(record) + "\n")


class ProgressBarCallback(TrainerCallback):
    """A compact progress bar showing the latest training reward and held-out accuracy."""

    def __init__(self, total_steps: int, description: str, reward_key: str, enabled: bool = True):
        self.total_steps = total_steps
        self.description = description
        self.reward_key = reward_key
        self.enabled = enabled
        self.bar = None
        self.postfix: dict[str, str] = {}

    def on_train_begin(self, args, state, control, **kwargs):
        if self.enabled:
            self.bar = tqdm(total=self.total_steps, desc=self.description, unit="step", dynamic_ncols=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs:
            return
        if self.reward_key in logs:
            self.postfix["reward"] = f"{logs[self.reward_key]:+.2f}"
        if HELD_OUT_KEY in logs:
            self.postfix["held-out acc"] = f"{logs[HELD_OUT_KEY]:.2f}"
        self.bar.set_postfix(self.postfix, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def plot_training_log(records: list[dict], reward_key: str, before: float, path: str | Path, title: str) -> bool:
    """Draws the training reward and the held-out accuracy per step into a PNG; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False

    reward_steps = [record["step"] for record in records if reward_key in record]
    rewards = [record[reward_key] for record in records if reward_key in record]
    accuracy_steps = [0] + [record["step"] for record in records if HELD_OUT_KEY in record]
    accuracies = [before] + [record[HELD_OUT_KEY] for record in records if HELD_OUT_KEY in record]

    figure, (reward_axis, accuracy_axis) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    reward_axis.plot(reward_steps, rewards, color="tab:blue", alpha=0.3, linewidth=1, label="per step")
    reward_axis.plot(reward_steps, moving_average(rewards, 10), color="tab:blue", linewidth=2, label="10-step mean")
    reward_axis.set_ylabel("training reward, every\ngenerated completion\n(+1 right, -1 wrong)")
    # The soft overlong punishment can take the total below -1.
    reward_axis.set_ylim(min([-1.05, *(value - 0.05 for value in rewards)]), 1.05)
    reward_axis.legend(loc="lower right")
    reward_axis.grid(alpha=0.3)
    accuracy_axis.plot(accuracy_steps, accuracies, color="tab:green", marker="o", markersize=3)
    accuracy_axis.axhline(before, color="grey", linestyle="--", linewidth=1, label=f"before training ({before:.2f})")
    accuracy_axis.set_ylabel("held-out greedy accuracy")
    accuracy_axis.set_xlabel("training step")
    accuracy_axis.set_ylim(0, 1)
    accuracy_axis.legend(loc="lower right")
    accuracy_axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def moving_average(values: list[float], window: int) -> list[float]:
    averaged, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        averaged.append(total / min(index + 1, window))
    return averaged

