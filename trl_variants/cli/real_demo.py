"""`trl-variants real-demo`: a real pretrained instruct model learning a real reasoning task with rewards, offline,
on a CPU.

SmolLM2-135M-Instruct (trl_variants/real/smollm2.py) trains with the chosen trainer on reasoning-gym's
`basic_arithmetic` (two one-digit terms, + and -), rewarded by the task's own verifier, and its sampled pass rate on
held-out prompts never trained on is measured before and after (trl_variants/real/run.py), with a progress line per
training step and per evaluation batch. The output folder, which appears only once complete, holds:

    model.safetensors, config.json, tokenizer files   the trained model
    README.md                                         its model card
    training_log.jsonl                                one JSON object per training step
    real_demo_summary.json                            the before/after numbers, written last

Until then the work is kept in `OUTPUT_DIR.partial` (a checkpoint after every step, the log, the evaluation before
training; trl_variants/real/sittings.py): an interrupt leaves it there, and the same command continues from it.
"""

import contextlib
import dataclasses
import json
import os
import shlex
import sys
import warnings

from transformers.utils import logging as transformers_logging

from ..real.run import DEFAULT_TASK, make_held_out, train_and_evaluate
from ..real.sittings import kept_work
from ..real.smollm2 import SmolLM2Unavailable, cache_root, smollm2_folder
from ..rewards.reasoning_gym_source import ReasoningGymError
from .common import REAL_DEMO_DEFAULTS, REAL_DEMO_SUMMARY_FILE, CliUsageError
from .output import ResumableFolder, check_not_finished, check_output_dir

SUMMARY_FILE = REAL_DEMO_SUMMARY_FILE
LOG_FILE = "training_log.jsonl"


def run_real_demo(
    variant: str = "dapo",
    steps: int = 20,
    seed: int = 0,
    output_dir: str = "real-demo-output",
    task: str | None = None,
    task_config: dict | None = None,
    held_out_prompts: int = 40,
    samples_per_prompt: int = 4,
    threads: int | None = None,
    out=None,
    command: str | None = None,
    overwrite: bool = False,
):
    """Runs the example, or continues an interrupted run of the same settings, and writes its output folder;
    returns the `RealRunResult`. `command`: the command line that started it, printed on an interrupt as the way to
    resume (default: the `trl-variants real-demo` command of these settings). A finished run already in
    `output_dir` is refused unless `overwrite`, which replaces it once the new run finishes."""
    out = out or sys.stdout
    task = task or DEFAULT_TASK
    settings = {
        "--variant": variant, "--steps": steps, "--seed": seed, "--task": task, "--task_config": task_config,
        "--held_out_prompts": held_out_prompts, "--samples_per_prompt": samples_per_prompt,
    }  # fmt: skip
    command = command or real_demo_command_line(settings, output_dir)
    check_output_dir(output_dir)
    check_not_finished(output_dir, SUMMARY_FILE, overwrite)
    try:
        print(f"Loading SmolLM2-135M-Instruct (converted once, cached under {cache_root()})...", file=out, flush=True)
        smollm2_folder()
        held_out = make_held_out(task, task_config, prompts=held_out_prompts)
    except (SmolLM2Unavailable, ReasoningGymError) as error:
        raise CliUsageError(str(error)) from None
    except ValueError as error:  # too few distinct questions for the held-out set
        raise CliUsageError(str(error)) from None
    with ResumableFolder(output_dir, marker_file=SUMMARY_FILE, settings=settings) as work:
        if work.resuming:
            print(f"Continuing the unfinished run kept in {work.path}/.", file=out, flush=True)
        try:
            with _quiet_libraries():
                result = train_and_evaluate(
                    variant=variant,
                    seed=seed,
                    steps=steps,
                    task=task,
                    task_config=task_config,
                    held_out=held_out,
                    samples_per_prompt=samples_per_prompt,
                    log_path=work.path / LOG_FILE,
                    output_dir=work.path,
                    threads=threads,
                    progress=lambda line: print(line, file=out, flush=True),
                    resume=True,
                )
        except KeyboardInterrupt:
            print(
                f"\nInterrupted: {kept_work(work.path, steps)}.\nTo resume, run the same command again from "
                f"{os.getcwd()}:\n  {command}",
                file=out,
                flush=True,
            )
            raise
        result.output_dir = str(work.final_path)
        summary = {key: value for key, value in dataclasses.asdict(result).items() if key != "log"}
        (work.path / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        work.publish()
    print_real_report(result, out)
    return result


@contextlib.contextmanager
def _quiet_libraries():
    """Library warnings and info logs off, and transformers' progress bar for each checkpoint's model file: the
    demo's own progress lines say more."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verbosity = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()
        progress_bars = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
        try:
            yield
        finally:
            transformers_logging.set_verbosity(verbosity)
            if progress_bars:
                transformers_logging.enable_progress_bar()


def real_demo_command_line(settings: dict, output_dir: str) -> str:
    """The `trl-variants real-demo` command of `settings` (flag to value; defaults left out) and `output_dir`."""
    words = ["trl-variants", "real-demo"]
    for flag, value in {**settings, "--output_dir": output_dir}.items():
        if value != REAL_DEMO_DEFAULTS.get(flag) and value is not None:
            words += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return shlex.join(words)


def print_real_report(result, out) -> None:
    before, after = result.before, result.after
    label = f"held-out pass rate ({before.prompts} prompts x {before.samples_per_prompt})"
    rows = [
        ("", "before", "after"),
        (label, f"{before.pass_rate:.2f}", f"{after.pass_rate:.2f}"),
        ("prompts always right", str(before.always_right), str(after.always_right)),
        ("prompts always wrong", str(before.always_wrong), str(after.always_wrong)),
    ]
    width = max(len(row[0]) for row in rows)
    print("", file=out)
    for name, first, second in rows:
        print(f"  {name:<{width}}  {first:>6}  {second:>6}", file=out)
    print(
        f"\n  {result.variant}, seed {result.seed}, {result.steps} steps, {result.seconds_per_step:.0f} s per step, "
        f"{result.threads} torch thread(s); printed on {result.machine}.",
        file=out,
    )
    print(f"\nModel, model card and {LOG_FILE} are in {result.output_dir}/", file=out)
