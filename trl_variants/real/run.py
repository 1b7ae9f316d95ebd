"""Train SmolLM2-135M-Instruct on a reasoning-gym task with one of the three trainers, and measure its held-out
pass rate before and after: the engine of `trl-variants real-demo`, reusable by benchmarks.

The held-out set is drawn with its own seed (`HELD_OUT_SEED`), the same for every training seed and variant, and
its questions are removed from the training set: reasoning-gym's small tasks repeat questions across seeds.
"""

import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import PrinterCallback, TrainerState

from ..log_records import step_record
from ..machine import describe_machine
from ..rewards.reasoning_gym_source import (
    ReasoningGymSource,
    distinct_questions,
    reasoning_gym_source,
    worked_example,
)
from ..variants import VARIANTS
from .evaluation import PassRate, sampled_pass_rate
from .progress import StepHeartbeat, StepProgress, clock, evaluation_progress
from .sittings import CHECKPOINT_EVERY_STEP, EarlierSittings, earlier_sittings, keep_before, remove_sitting_files
from .smollm2 import load_smollm2

# Two one-digit terms, + and -: the base model is right on a fraction of them, so its first steps mix informative
# and degenerate groups (all right or all wrong), the regime dynamic sampling is for.
DEFAULT_TASK = "basic_arithmetic"
DEFAULT_TASK_CONFIG = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+", "-"],
    "allow_parentheses": False,
    "allow_negation": False,
}
HELD_OUT_SEED = 10_000
# Training entries generated before the held-out questions are removed; the default task has 242 distinct
# questions (reasoning-gym draws its one-digit operands from 0 to 10), of which the held-out set takes 40.
DEFAULT_TRAIN_SIZE = 1000

# 2 prompts x 8 completions of at most 32 tokens per step (after the worked example the model answers in about 13). lr 1e-5 for a full fine-tune of 135M parameters;
# gradient checkpointing off, since recomputing activations only saves memory that a 135M model does not need.
TRAINING_DEFAULTS = {
    "per_device_train_batch_size": 16,
    "num_generations": 8,
    "max_completion_length": 32,
    "learning_rate": 1e-5,
    "temperature": 1.0,
    "beta": 0.0,
    "gradient_checkpointing": False,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": [],
    "disable_tqdm": True,
}
# DAPO's soft overlong punishment over the last 8 of the 32 tokens: answers need far fewer.
VARIANT_DEFAULTS = {"dapo": {"overlong_buffer_length": 8}, "dr-grpo": {}, "grpo": {}}
HELD_OUT_KEY = "held_out_pass_rate"
ELAPSED_KEY = "elapsed_seconds"
GENERATED_TOKENS_KEY = "generated_tokens_total"


@dataclass
class RealRunResult:
    """What `train_and_evaluate` measured. `log`: one dict per logged step (TRL's metrics plus `elapsed_seconds`
    of training so far, held-out evaluations excluded, `generated_tokens_total` and, on evaluation steps, `held_out_pass_rate`)."""

    variant: str
    seed: int
    steps: int
    task: str
    task_config: dict
    before: PassRate
    after: PassRate
    train_prompts: int
    excluded_from_training: int
    train_seconds: float
    seconds_per_step: float
    threads: int
    machine: str
    log: list[dict] = field(default_factory=list, repr=False)
    output_dir: str | None = None


def task_example(task: str = DEFAULT_TASK, task_config: dict | None = None) -> dict:
    """The worked example shown before every question (`reasoning_gym_source`'s `example`): reasoning-gym's entry
    drawn with `EXAMPLE_SEED`, answered as `<expression> = <answer>` then `Answer: <answer>` where the task records
    the expression (the arithmetic tasks), else as `Answer: <answer>`."""
    example = worked_example(task, _task_config(task, task_config))
    expression = example.get("metadata", {}).get("expression")
    if expression is not None:
        example["reply"] = f"{expression} = {example['answer']}\nAnswer: {example['answer']}"
    return example


def make_held_out(
    task: str = DEFAULT_TASK, task_config: dict | None = None, prompts: int = 40, seed: int = HELD_OUT_SEED
) -> ReasoningGymSource:
    """`prompts` distinct questions of `task`, drawn with `seed`: the held-out set."""
    config = _task_config(task, task_config)
    source = reasoning_gym_source(
        task, config, size=max(4 * prompts, 200), seed=seed, example=task_example(task, task_config)
    )
    held_out = distinct_questions(source, prompts)
    if len(held_out.dataset) < prompts:
        raise ValueError(
            f"make_held_out: task {task!r} with config {config} gave only {len(held_out.dataset)} distinct questions, "
            f"fewer than prompts={prompts}; lower prompts or widen the task's config."
        )
    return held_out


def make_training_source(
    held_out: ReasoningGymSource,
    task: str = DEFAULT_TASK,
    task_config: dict | None = None,
    size: int = DEFAULT_TRAIN_SIZE,
    seed: int = 0,
) -> ReasoningGymSource:
    """`size` entries of `task` drawn with `seed`, without the held-out set's questions."""
    return reasoning_gym_source(
        task,
        _task_config(task, task_config),
        size=size,
        seed=seed,
        exclude_questions=held_out.questions,
        example=task_example(task, task_config),
    )


def _task_config(task: str, task_config: dict | None) -> dict:
    if task_config is not None:
        return dict(task_config)
    return dict(DEFAULT_TASK_CONFIG) if task == DEFAULT_TASK else {}


def variant_config(variant: str, output_dir: str, seed: int, steps: int, overrides: dict | None = None):
    """The trainer config of `variant` (dapo, dr-grpo or grpo) with the example's settings, then `overrides`."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is not allowed; choose one of {', '.join(VARIANTS)}.")
    on_cpu = not torch.cuda.is_available()
    settings = {
        **TRAINING_DEFAULTS,
        **VARIANT_DEFAULTS[variant],
        "max_steps": steps,
        "seed": seed,
        "use_cpu": on_cpu,
        "bf16": not on_cpu,
        **(overrides or {}),
    }
    return VARIANTS[variant].config_class(output_dir, **settings)


class RunLogCallback(TrainerCallback):
    """Keeps every logged step with the seconds spent training so far (held-out evaluations and checkpoint writes
    excluded) and the completion tokens generated so far, measures the held-out pass rate every `eval_every` steps,
    and appends each record to `log_path` as JSON. `previous`: the records of earlier sittings of a resumed run,
    whose last one the clock and the token count continue from."""

    def __init__(
        self,
        measure=None,
        eval_every: int | None = None,
        log_path: str | os.PathLike | None = None,
        previous: list[dict] | None = None,
    ):
        self.measure, self.eval_every = measure, eval_every
        self.log_path = Path(log_path) if log_path else None
        self.records: list[dict] = list(previous or [])
        last = self.records[-1] if self.records else {}
        self.earlier_seconds = last.get(ELAPSED_KEY, 0.0)
        self.generated_tokens = last.get(GENERATED_TOKENS_KEY, 0.0)
        self.started = time.perf_counter()
        self.evaluation_seconds = self.checkpoint_seconds = 0.0
        self.logged_at: float | None = None
        self.pending: PassRate | None = None

    def train_seconds(self) -> float:
        """Seconds spent training so far, over every sitting."""
        this_sitting = time.perf_counter() - self.started - self.evaluation_seconds - self.checkpoint_seconds
        return self.earlier_seconds + this_sitting

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        # transformers saves right after logging the step.
        if self.logged_at is not None:
            self.checkpoint_seconds += time.perf_counter() - self.logged_at
            self.logged_at = None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.measure is not None and self.eval_every and state.global_step % self.eval_every == 0:
            self.pending = self.measure(model)
            self.evaluation_seconds += self.pending.seconds

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs or not state.is_world_process_zero:
            return
        if "dynamic_sampling/generated_tokens" in logs:
            self.generated_tokens += logs["dynamic_sampling/generated_tokens"]
        elif "completions/mean_length" in logs:
            batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
            self.generated_tokens += logs["completions/mean_length"] * batch
        record = step_record(state.global_step, logs)
        record[ELAPSED_KEY] = round(self.train_seconds(), 2)
        record[GENERATED_TOKENS_KEY] = self.generated_tokens
        if self.pending is not None:
            record[HELD_OUT_KEY] = self.pending.pass_rate
            self.pending = None
        self.records.append(record)
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as log_file:
                log_file.write(json.dumps(record) + "\n")
        self.logged_at = time.perf_counter()


def train_and_evaluate(
    variant: str = "dapo",
    seed: int = 0,
    steps: int = 20,
    task: str = DEFAULT_TASK,
    task_config: dict | None = None,
    train_size: int = DEFAULT_TRAIN_SIZE,
    held_out: ReasoningGymSource | None = None,
    samples_per_prompt: int = 4,
    greedy: bool = False,
    eval_every: int | None = None,
    config_overrides: dict | None = None,
    callbacks: list | None = None,
    log_path: str | os.PathLike | None = None,
    output_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    progress=None,
    resume: bool = False,
) -> RealRunResult:
    """Trains SmolLM2-135M-Instruct with `variant` for `steps` optimizer steps on `task` and returns the held-out
    pass rate before and after.

    `held_out`: the evaluation set (default `make_held_out(task, task_config)`, 40 prompts); its questions are
    removed from training. `samples_per_prompt`/`greedy`: how it is evaluated (`sampled_pass_rate`), with the
    training run's `max_completion_length` and `temperature`. `eval_every`: also evaluate every that many steps
    (logged as `held_out_pass_rate`). `config_overrides`: trainer config fields over the example's settings.
    `callbacks`: extra `TrainerCallback`s. `log_path`: a JSONL file receiving one record per step. `output_dir`:
    where the trained model, tokenizer and model card are saved (default: nothing is saved). `threads`: torch's
    thread count during the run. `progress`: a function receiving each line of progress: the phases, every
    training step and every evaluation batch, with the time elapsed and an estimate of the time left.
    `resume`: keep the run's work in `output_dir` as it goes (a checkpoint after every step, the evaluation before
    training) and, when `output_dir` holds an earlier sitting's work, continue from its last complete checkpoint,
    with the same results as a run never stopped (trl_variants/real/sittings.py).
    """
    if resume and (output_dir is None or log_path is None):
        raise ValueError("train_and_evaluate: resume=True keeps the run's work in output_dir and log_path; pass both.")
    report = progress or (lambda line: None)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        held_out = held_out if held_out is not None else make_held_out(task, task_config)
        train = make_training_source(held_out, task, task_config, train_size, seed)
        earlier = earlier_sittings(output_dir, log_path) if resume else EarlierSittings(None, None, [])
        overrides = {**CHECKPOINT_EVERY_STEP, **(config_overrides or {})} if resume else config_overrides
        with tempfile.TemporaryDirectory(prefix="trl-variants-real-") as scratch:
            config = variant_config(variant, str(output_dir or scratch), seed, steps, overrides)
            model, tokenizer = load_smollm2()

            def measure(current_model, label: str | None = None) -> PassRate:
                return sampled_pass_rate(
                    current_model, tokenizer, held_out, samples_per_prompt, greedy,
                    max_new_tokens=config.max_completion_length, temperature=config.temperature, seed=seed,
                    progress=evaluation_progress(report, label) if progress and label else None,
                )

            samples = f"{len(held_out.dataset)} prompts x {1 if greedy else samples_per_prompt}"
            before = earlier.before
            if before is None:
                report(f"Held-out pass rate before training ({samples})...")
                before = measure(model, "before training:")
                if resume:
                    keep_before(output_dir, before)
                report(f"  {before.pass_rate:.3f} in {clock(before.seconds)}.")
            else:
                report(f"Held-out pass rate before training: {before.pass_rate:.3f}, kept from an earlier sitting.")
            if earlier.checkpoint is not None:
                report(f"Resuming from step {earlier.step} of {steps} ({earlier.checkpoint}).")
            report(f"Training {variant} for {steps} steps on {len(train.dataset)} prompts ({train.excluded} held-out "
                   "questions removed), a line per step...")
            log_callback = RunLogCallback(measure, eval_every, log_path, previous=earlier.records)
            heartbeat = StepHeartbeat(report)
            shown = [StepProgress(report, checkpoints=resume), heartbeat] if progress else []
            all_callbacks = [log_callback, *shown, *(callbacks or [])]
            if earlier.step >= steps:
                trainer = _trainer_at(earlier.checkpoint, variant, model, tokenizer, train, config, all_callbacks)
                train_seconds = log_callback.earlier_seconds
            else:
                trainer = _build_trainer(variant, model, tokenizer, train, config, all_callbacks)
                heartbeat.watch(trainer)
                trainer.train(resume_from_checkpoint=earlier.checkpoint)
                train_seconds = log_callback.train_seconds()
            report(f"  trained in {clock(train_seconds)}"
                   + (f" (and {clock(log_callback.checkpoint_seconds)} writing checkpoints)" if resume else "")
                   + f". Held-out pass rate after training ({samples})...")
            after = measure(trainer.model, "after training:")
            if output_dir is not None:
                trainer.save_model(str(output_dir))
                tokenizer.save_pretrained(str(output_dir))
                trainer.create_model_card(model_name=Path(output_dir).name, dataset_name=f"reasoning-gym {task}")
            if resume:
                remove_sitting_files(output_dir)
    finally:
        torch.set_num_threads(previous_threads)
    return RealRunResult(
        variant=variant,
        seed=seed,
        steps=steps,
        task=task,
        task_config=_task_config(task, task_config),
        before=before,
        after=after,
        train_prompts=len(train.dataset),
        excluded_from_training=train.excluded,
        train_seconds=round(train_seconds, 1),
        seconds_per_step=round(train_seconds / steps, 2),
        threads=torch.get_num_threads() if threads is None else threads,
        machine=describe_machine(),
        log=log_callback.records,
        output_dir=str(output_dir) if output_dir is not None else None,
    )


def _build_trainer(variant, model, tokenizer, train: ReasoningGymSource, config, callbacks):
    trainer = VARIANTS[variant].trainer_class(
        model,
        [train.reward_func],
        args=config,
        train_dataset=train.dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def _trainer_at(checkpoint: str, variant, model, tokenizer, train: ReasoningGymSource, config, callbacks):
    """The trainer of a run whose every step is done, holding the model and state of its last checkpoint: resumed
    from the checkpoint of its last step, transformers would train one step more."""
    trained = type(model).from_pretrained(checkpoint, dtype=model.dtype)
    trainer = _build_trainer(variant, trained, tokenizer, train, config, callbacks)
    trainer.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
    return trainer


def result_as_dict(result: RealRunResult) -> dict:
    """`result` as plain JSON-ready data."""
    return dataclasses.asdict(result)
