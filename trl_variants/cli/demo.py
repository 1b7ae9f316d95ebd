"""`trl-variants demo`: watch a policy learn from rewards, offline, on a CPU, in about a minute on 2 cores: the toy
task's tiny Qwen2 model, warm-started on addition problems `a+b=` so that it answers some, is trained with the +1/-1
correctness reward, and its greedy accuracy on held-out problems is measured before and after. The output folder
appears only once complete: the policy and its model card, training_log.jsonl, training_curves.png and
demo_summary.json (the numbers, written last)."""

import json
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from matplotlib.figure import Figure
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as transformers_logging

from ..dynamic_sampling.selection import ALL_GROUPS_REWARD_METRIC
from ..log_records import step_record
from ..machine import describe_machine
from ..toy import greedy_accuracy, make_toy_task
from ..variants import VARIANTS
from .common import CliUsageError

SUMMARY_FILE, LOG_FILE, PLOT_FILE = "demo_summary.json", "training_log.jsonl", "training_curves.png"
HELD_OUT_EVERY = 10  # steps between measurements of the held-out accuracy
# 400 problems with operands up to 19: too many for the tiny model to memorise during the warm start, so what it
# learns (and what RL then sharpens) carries over to the 80 held-out problems. 400 warm-start steps leave it right
# about half the time.
DEMO_TASK = {"max_operand": 19, "warm_start_steps": 400, "held_out_fraction": 0.2}
# 16 prompts x 8 completions per step. The tiny policy's distribution is flat, so rollouts are drawn at
# temperature 0.5 to stay near the greedy answer that is evaluated; lr 1e-3 suits a 100k-parameter model, and the
# 20-step warm-up keeps Adam's first, outsized updates from undoing part of the warm start. Recomputing
# activations (gradient checkpointing) only saves memory, which such a model does not need.
DEMO_TRAINING = {"per_device_train_batch_size": 128, "num_generations": 8, "max_completion_length": 6,
                 "temperature": 0.5, "learning_rate": 1e-3, "warmup_steps": 20, "beta": 0.0,
                 "gradient_checkpointing": False}  # fmt: skip
# DAPO's own additions, small enough to matter on the toy: punish completions past 4 of the 6 allowed tokens
# (answers need at most 3 with the end token) and keep only groups whose answers disagree.
VARIANT_SETTINGS = {"dapo": {"overlong_buffer_length": 2, "dynamic_sampling": True}}


class DemoLog(TrainerCallback):
    """Appends each logged step to `path`; every `HELD_OUT_EVERY` steps and on the last, adds the held-out accuracy
    (`measure(model)`) to the step's record and prints a progress line."""

    def __init__(self, path: Path, measure, reward_key: str, out):
        self.path, self.measure, self.reward_key, self.out, self.records = path, measure, reward_key, out, []

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the end-of-training summary is not a step
            return
        record = step_record(state.global_step, logs)
        if state.global_step % HELD_OUT_EVERY == 0 or state.global_step == state.max_steps:
            record["held_out_accuracy"] = self.measure(model)
            print(f"  step {state.global_step}/{state.max_steps}: training reward {record[self.reward_key]:+.2f}, "
                  f"held-out accuracy {record['held_out_accuracy']:.2f}", file=self.out, flush=True)  # fmt: skip
        self.records.append(record)
        with self.path.open("a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(record) + "\n")


def run_demo(steps: int = 300, seed: int = 0, output_dir: str = "demo-output", variant: str = "dapo", out=None):
    """Trains the toy policy with `variant` for `steps` steps, writes the output folder; returns the summary dict."""
    out, started, final = out or sys.stdout, time.perf_counter(), Path(output_dir).expanduser().absolute()
    check_replaceable(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    # One torch thread: the policy's 64-wide matrices gain nothing from a second and lose much to synchronisation
    # on a busy machine. Library warnings, info logs and progress bars would bury the demo's own lines.
    threads, verbosity, bars = torch.get_num_threads(), transformers_logging.get_verbosity(), \
        transformers_logging.is_progress_bar_enabled()  # fmt: skip
    torch.set_num_threads(1)
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            summary = train_and_write(steps, seed, variant, staging, final, out)
        summary["seconds"] = round(time.perf_counter() - started, 1)
        (staging / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")  # last: the folder is complete
        check_replaceable(final)
        shutil.rmtree(final, ignore_errors=True)
        staging.replace(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(threads)
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    print_report(summary, out)
    return summary


def check_replaceable(final: Path) -> None:
    """An existing output folder is replaced only when empty or holding an earlier demo output, never other files."""
    if final.is_dir() and any(final.iterdir()) and not (final / SUMMARY_FILE).is_file():
        raise CliUsageError(f"output_dir {str(final)!r} already exists and holds other files; pass a new or empty "
                            "folder to --output_dir (an earlier demo output is replaced).")  # fmt: skip


def train_and_write(steps: int, seed: int, variant: str, staging: Path, final: Path, out) -> dict:
    config_class, trainer_class = VARIANTS[variant].config_class, VARIANTS[variant].trainer_class
    print(f"Building the toy task (seed {seed}): a tiny Qwen2 policy warm-started on addition problems.", file=out)
    task = make_toy_task(seed=seed, **DEMO_TASK)
    before, train_before = task.held_out_accuracy(), greedy_accuracy(task.model, task.tokenizer, task.train_problems)
    print(f"Held-out greedy accuracy before training: {before:.2f} on {len(task.eval_problems)} problems. Training "
          f"with {trainer_class.__name__} for {steps} steps...", file=out, flush=True)  # fmt: skip
    config = config_class(str(staging), **DEMO_TRAINING, **VARIANT_SETTINGS.get(variant, {}), max_steps=steps,
                          seed=seed, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to=[],
                          disable_tqdm=True)  # fmt: skip
    # Under dynamic sampling TRL's `reward` covers only the trained, mixed groups and hardly moves; the reward over
    # every generated group follows the policy.
    reward_key = ALL_GROUPS_REWARD_METRIC if getattr(config, "dynamic_sampling", False) else "reward"
    log = DemoLog(staging / LOG_FILE, task.held_out_accuracy, reward_key, out)
    trainer = trainer_class(task.model, task.reward_funcs, args=config, train_dataset=task.train_dataset,
                            processing_class=task.tokenizer, callbacks=[log])  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    trainer.save_model(str(staging))
    trainer.create_model_card(model_name=final.name, dataset_name="trl_variants.toy (addition)")
    plot_training_log(log.records, reward_key, before, staging / PLOT_FILE,
                      f"trl-variants demo: {variant} on toy addition (seed {seed})")  # fmt: skip
    return {"variant": variant, "seed": seed, "steps": steps, "held_out_accuracy_before": before,
            "held_out_accuracy_after": task.held_out_accuracy(trainer.model), "train_accuracy_before": train_before,
            "train_accuracy_after": greedy_accuracy(trainer.model, task.tokenizer, task.train_problems),
            "held_out_problems": len(task.eval_problems), "train_problems": len(task.train_problems),
            "output_dir": str(final),
            # The accuracies follow this machine's floating-point arithmetic: another CPU takes another trajectory.
            "machine": describe_machine()}  # fmt: skip


def plot_training_log(records: list[dict], reward_key: str, before: float, path: Path, title: str) -> None:
    """The training reward (per step and its 10-step mean) and the held-out accuracy per step, as a PNG."""
    steps, rewards = [record["step"] for record in records], [record[reward_key] for record in records]
    mean = [sum(rewards[max(0, index - 9) : index + 1]) / min(index + 1, 10) for index in range(len(rewards))]
    measured = [record for record in records if "held_out_accuracy" in record]
    held_out_steps = [0] + [record["step"] for record in measured]
    figure = Figure(figsize=(7, 6))
    reward_axis, accuracy_axis = figure.subplots(2, 1, sharex=True)
    reward_axis.plot(steps, rewards, color="tab:blue", alpha=0.3, linewidth=1, label="per step")
    reward_axis.plot(steps, mean, color="tab:blue", linewidth=2, label="10-step mean")
    # The soft overlong punishment can take the total below -1.
    reward_axis.set(ylabel="training reward, every\ngenerated completion\n(+1 right, -1 wrong)",
                    ylim=(min([-1.05, *(value - 0.05 for value in rewards)]), 1.05))  # fmt: skip
    accuracy_axis.plot(held_out_steps, [before] + [record["held_out_accuracy"] for record in measured],
                       color="tab:green", marker="o", markersize=3)  # fmt: skip
    accuracy_axis.axhline(before, color="grey", linestyle="--", linewidth=1, label=f"before training ({before:.2f})")
    accuracy_axis.set(ylabel="held-out greedy accuracy", xlabel="training step", ylim=(0, 1))
    for axis in (reward_axis, accuracy_axis):
        axis.legend(loc="lower right")
        axis.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def print_report(summary: dict, out) -> None:
    labels = {"held_out": f"held-out accuracy ({summary['held_out_problems']} problems)",
              "train": f"train accuracy ({summary['train_problems']} problems)"}  # fmt: skip
    width = max(map(len, labels.values()))
    print(f"\n  {'':<{width}}  before   after", file=out)
    for key, label in labels.items():
        before, after = summary[f"{key}_accuracy_before"], summary[f"{key}_accuracy_after"]
        print(f"  {label:<{width}}  {before:>6.2f}  {after:>6.2f}", file=out)
    change = summary["held_out_accuracy_after"] - summary["held_out_accuracy_before"]
    print(f"\n  Printed on {summary['machine']}.\n\nHeld-out accuracy changed by {change:+.2f} in "
          f"{summary['seconds']:.0f} s. Model, model card, {LOG_FILE} and {PLOT_FILE} are in {summary['output_dir']}/",
          file=out)  # fmt: skip
