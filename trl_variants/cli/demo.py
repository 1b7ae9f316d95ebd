"""`trl-variants demo`: watch a policy learn from rewards, offline, on a CPU, in about a minute on 2 cores.

The policy is the embedded toy task's tiny Qwen2 model, warm-started with a little supervised training on addition
problems `a+b=` with operands up to 19 so that it answers some of them. DAPO then trains it on the training problems
with the +1/-1 correctness reward only, and its greedy accuracy is measured on held-out problems it never trained
on, before and after. Everything lands in an output folder that appears only once complete:

    model.safetensors, config.json, tokenizer files   the trained policy
    README.md                                         its model card (variant, settings, citation, results)
    training_log.jsonl                                one JSON object per training step
    training_curves.png                               training reward and held-out accuracy per step
    demo_summary.json                                 the before/after numbers, written last
"""

import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as transformers_logging

from ..dynamic_sampling.selection import ALL_GROUPS_REWARD_METRIC
from ..machine import describe_machine
from ..toy import greedy_accuracy, make_toy_task
from .args import VARIANTS, CliUsageError
from .common import DEMO_DEFAULT_OUTPUT_DIR, DEMO_DEFAULT_STEPS
from .demo_artifacts import (
    HeldOutAccuracyCallback,
    JsonlLogCallback,
    ProgressBarCallback,
    plot_training_log,
)
from .output import StagedFolder, check_output_dir

SUMMARY_FILE = "demo_summary.json"
LOG_FILE = "training_log.jsonl"
PLOT_FILE = "training_curves.png"
# The training reward the progress bar and the plot show. Under dynamic sampling TRL's `reward` is measured on the
# trained, mixed groups only and hardly moves; the reward over every generated group follows the policy.
REWARD_KEY = ALL_GROUPS_REWARD_METRIC
PLAIN_REWARD_KEY = "reward"
HELD_OUT_EVERY = 10

# 400 problems with operands up to 19: too many for the tiny model to memorise during the warm start, so what it learns (and
# what RL then sharpens) carries over to the 80 held-out problems. 400 warm-start steps leave it right about
# half the time.
DEMO_TASK = {"max_operand": 19, "warm_start_steps": 400, "held_out_fraction": 0.2}

# 16 prompts x 8 completions per step. The tiny policy's distribution is flat, so rollouts are drawn at
# temperature 0.5 to stay near the greedy answer that is evaluated; lr 1e-3 suits a 100k-parameter model, and the
# 20-step warm-up keeps Adam's first, outsized updates from undoing part of the warm start.
DEMO_TRAINING = {
    "per_device_train_batch_size": 128,
    "num_generations": 8,
    "max_completion_length": 6,
    "temperature": 0.5,
    "learning_rate": 1e-3,
    "warmup_steps": 20,
    "beta": 0.0,
    # Recomputing activations only saves memory, which a 100k-parameter model does not need.
    "gradient_checkpointing": False,
}
# DAPO's own additions, small enough to matter on the toy: punish completions past 4 of the 6 allowed tokens
# (answers need at most 3 with the end token) and keep only groups whose answers disagree.
VARIANT_SETTINGS = {
    "dapo": {"overlong_buffer_length": 2, "dynamic_sampling": True},
    "dr-grpo": {},
    "grpo": {},
}


@dataclass
class DemoResult:
    variant: str
    seed: int
    steps: int
    held_out_accuracy_before: float
    held_out_accuracy_after: float
    train_accuracy_before: float
    train_accuracy_after: float
    held_out_problems: int
    train_problems: int
    seconds: float
    output_dir: str
    # The accuracies follow this machine's floating-point arithmetic: another CPU takes another trajectory.
    machine: str


def run_demo(
    steps: int = DEMO_DEFAULT_STEPS,
    seed: int = 0,
    output_dir: str = DEMO_DEFAULT_OUTPUT_DIR,
    variant: str = "dapo",
    show_progress: bool = True,
    out=None,
) -> DemoResult:
    """Trains the toy policy with `variant` for `steps` steps and writes the demo's output folder."""
    out = out or sys.stdout
    started = time.perf_counter()
    if variant not in VARIANTS:
        raise CliUsageError(f"--variant {variant!r} is not allowed; choose one of {', '.join(VARIANTS)}.")
    if steps < 1:
        raise CliUsageError(f"--steps {steps} is not allowed; expected an integer >= 1.")
    check_output_dir(output_dir)
    staged = StagedFolder(output_dir, marker_file=SUMMARY_FILE)
    try:
        with _quiet_libraries():
            result = _train_and_write(steps, seed, variant, staged, show_progress, started, out)
        staged.publish()
    except BaseException:
        staged.discard()
        raise
    print_report(result, out)
    return result


def _train_and_write(steps, seed, variant_name, staged, show_progress, started, out) -> DemoResult:
    variant = VARIANTS[variant_name]
    print(f"Building the toy task (seed {seed}): a tiny Qwen2 policy warm-started on addition problems.", file=out)
    task = make_toy_task(seed=seed, **DEMO_TASK)
    measure = task.held_out_accuracy
    train_before = greedy_accuracy(task.model, task.tokenizer, task.train_problems)
    before = measure()
    print(
        f"Held-out greedy accuracy before training: {before:.2f} on {len(task.eval_problems)} problems. "
        f"Training with {variant.trainer_class.__name__} for {steps} steps...",
        file=out,
    )

    config = variant.config_class(
        str(staged.path),
        **DEMO_TRAINING,
        **VARIANT_SETTINGS[variant_name],
        max_steps=steps,
        seed=seed,
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )
    log_callback = JsonlLogCallback(staged.path / LOG_FILE)
    reward_key = REWARD_KEY if getattr(config, "dynamic_sampling", False) else PLAIN_REWARD_KEY
    callbacks = [
        HeldOutAccuracyCallback(measure, every=HELD_OUT_EVERY),
        log_callback,
        ProgressBarCallback(
            steps, f"{variant.config_class.__name__.removesuffix('Config')} training", reward_key, enabled=show_progress
        ),
    ]
    trainer = variant.trainer_class(
        task.model,
        task.reward_funcs,
        args=config,
        train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()

    result = DemoResult(
        variant=variant_name,
        seed=seed,
        steps=steps,
        held_out_accuracy_before=before,
        held_out_accuracy_after=measure(trainer.model),
        train_accuracy_before=train_before,
        train_accuracy_after=greedy_accuracy(trainer.model, task.tokenizer, task.train_problems),
        held_out_problems=len(task.eval_problems),
        train_problems=len(task.train_problems),
        seconds=0.0,
        machine=describe_machine(),
        output_dir=str(Path(staged.final_path)),
    )
    trainer.save_model(str(staged.path))
    trainer.create_model_card(model_name=staged.final_path.name, dataset_name="trl_variants.toy (addition)")
    _append_results_to_card(staged.path / "README.md", result)
    plotted = plot_training_log(
        log_callback.records,
        reward_key,
        before,
        staged.path / PLOT_FILE,
        title=f"trl-variants demo: {variant_name} on toy addition (seed {seed})",
    )
    if not plotted:
        print(f"{PLOT_FILE} skipped: matplotlib is not installed (pip install matplotlib).", file=out)
    result.seconds = round(time.perf_counter() - started, 1)
    # Written last: its presence marks the folder as complete.
    (staged.path / SUMMARY_FILE).write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
    return result


def _append_results_to_card(card_path: Path, result: DemoResult) -> None:
    with card_path.open("a", encoding="utf-8") as card:
        card.write(
            "\n## Demo results\n\n"
            f"Trained by `trl-variants demo --variant {result.variant} --seed {result.seed} --steps {result.steps}` "
            f"on the embedded toy addition task, on {result.machine}.\n\n"
            "| greedy accuracy | before | after |\n|---|---|---|\n"
            f"| held-out problems ({result.held_out_problems}) | {result.held_out_accuracy_before:.2f} | "
            f"{result.held_out_accuracy_after:.2f} |\n"
            f"| training problems ({result.train_problems}) | {result.train_accuracy_before:.2f} | "
            f"{result.train_accuracy_after:.2f} |\n"
        )


def print_report(result: DemoResult, out) -> None:
    change = result.held_out_accuracy_after - result.held_out_accuracy_before
    rows = [
        ("", "before", "after"),
        (
            f"held-out accuracy ({result.held_out_problems} problems)",
            f"{result.held_out_accuracy_before:.2f}",
            f"{result.held_out_accuracy_after:.2f}",
        ),
        (
            f"train accuracy ({result.train_problems} problems)",
            f"{result.train_accuracy_before:.2f}",
            f"{result.train_accuracy_after:.2f}",
        ),
    ]
    width = max(len(row[0]) for row in rows)
    print("", file=out)
    for label, before, after in rows:
        print(f"  {label:<{width}}  {before:>6}  {after:>6}", file=out)
    print(f"\n  Printed on {result.machine}.", file=out)
    print(
        f"\nHeld-out accuracy changed by {change:+.2f} in {result.seconds:.0f} s. Model, model card, "
        f"{LOG_FILE} and {PLOT_FILE} are in {result.output_dir}/",
        file=out,
    )


class _quiet_libraries:
    """For the demo's duration: silences library deprecation warnings and info logs so its output stays readable,
    and runs torch on one thread, since the policy's 64-wide matrices gain nothing from a second thread and lose a
    lot to synchronisation on a busy machine."""

    def __enter__(self):
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")
        self._verbosity = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()
        self._progress_bars = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
        return self

    def __exit__(self, *exc_info):
        transformers_logging.set_verbosity(self._verbosity)
        if self._progress_bars:
            transformers_logging.enable_progress_bar()
        self._warnings.__exit__(*exc_info)
        torch.set_num_threads(self._threads)
        return False
