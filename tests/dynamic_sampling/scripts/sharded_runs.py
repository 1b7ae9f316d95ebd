"""The training runs shared by the launch scripts of the sharded engines, DeepSpeed ZeRO
(tests/deepspeed/scripts/zero_runs.py) and FSDP (tests/fsdp/scripts/fsdp_runs.py). Each script supplies an engine:
what it changes in the trainer's config, how it reads the weights whole, and what it records of its own wrapping.

Runs, one after the other in the same process group, from the same warm-started policy:

- "defaults": `DAPOTrainer` at its defaults (dynamic sampling, carrying) with prompt skipping turned on, as in every
  run but "published" and "dr_grpo", under a reward with which half the prompts' groups are degenerate, so that
  prompts are skipped and surplus groups carried; five steps, saving at steps 2 and 4;
- "resumed": "defaults" resumed from its step-2 checkpoint (groups are carried into step 3);
- "published": DAPO as published (no skipping, no carrying); "dr_grpo": `DrGRPOTrainer`;
- "capped": "defaults" with `max_rows_per_generate_call` set, so that every round takes several generate calls;
- "reward_model": a second tiny model, a sequence classifier TRL loads from a path and prepares with the engine,
  as a reward beside the half-degenerate one (which decides degeneracy);
- "lora": PEFT LoRA adapters on the policy;
- "drop": `dynamic_sampling="drop"` under the rank-skewed reward of "uneven": every group rank 0 holds is flat, so
  rank 0 trains no row of its own, yet must join every forward and backward;
- "uneven": work deliberately uneven over the processes: six rows per process in groups of four, so that groups
  straddle the processes; every group rank 0 generates is degenerate, so rank 1 alone finds informative groups
  and more rounds are needed; rank 1 always generates `max_completion_length` tokens while rank 0 stops at EOS, so
  every decoding step of rank 1 is a collective rank 0 must join.

Each rank writes `DIR/<run>_rank<r>.json`, which the engine's tests compare.
"""

import copy
import json
from pathlib import Path
from typing import Protocol

import torch
from accelerate import PartialState
from peft import LoraConfig
from transformers import Qwen2Config, Qwen2ForSequenceClassification

from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward
from tests.dynamic_sampling.scripts.step_records import recording_steps
from tests.helpers import DAPO_AS_PUBLISHED, toy_config
from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer
from trl_variants.toy import make_toy_task

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8  # two processes: 16 rows, 4 groups per step
UNEVEN_PER_DEVICE_BATCH = 6  # two processes: 12 rows, 3 groups per step, one of them on both processes
GENERATE_CALL_CAP = 4  # "capped": each process's 8 rows a round go in two generate calls
STEPS = 3
RESUME_STEPS = 5
SAVE_STEPS = 2
REWARD_MODEL = "reward_model"


class Engine(Protocol):
    def configure(self, config) -> None:
        """Changes the trainer's config before the trainer is built."""

    def adjust(self, trainer) -> None:
        """Changes what the trainer built (its accelerator's settings) before it trains."""

    def weight_sums(self, model) -> dict[str, list[float]]:
        """Every parameter's sum and sum of absolute values, the parameter read whole (a collective on every rank
        where the engine shards it)."""

    def record(self, trainer) -> dict:
        """What the engine did to the trainer's models, for the tests to check."""


class RankSkewedReward(HalfDegenerateReward):
    """The half-degenerate reward on rank 1; on rank 0 every completion scores 0, so every group rank 0 generates is
    degenerate."""

    __name__ = "rank_skewed_reward"

    def __init__(self, num_generations: int, rank: int):
        super().__init__(num_generations)
        self.rank = rank

    def score(self, index, prompt, completion_ids):
        return 0.0 if self.rank == 0 else super().score(index, prompt, completion_ids)


def sums(parameters) -> dict[str, list[float]]:
    """`(name, whole tensor)` pairs as each parameter's sum and sum of absolute values."""
    return {name: [float(p.detach().double().sum()), float(p.detach().double().abs().sum())] for name, p in parameters}


def save_reward_model(path: Path, task) -> None:
    """A tiny sequence classifier with the toy tokenizer, saved by the main process for TRL to load. Built before
    any trainer config exists: once one enables ZeRO-3, transformers builds models under `deepspeed.zero.Init`, a
    collective that the other processes would not join."""
    with PartialState().main_process_first():
        if PartialState().is_main_process:
            torch.manual_seed(1)
            policy_config = task.model.config
            config = Qwen2Config(
                **{key: getattr(policy_config, key) for key in (
                    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "max_position_embeddings", "pad_token_id", "eos_token_id", "bos_token_id",
                )},
                num_labels=1,
            )  # fmt: skip
            Qwen2ForSequenceClassification(config).save_pretrained(path)
            task.tokenizer.save_pretrained(path)


def build_run(name: str, task, pristine, out_dir: Path, rank: int, engine: Engine, **overrides):
    """The trainer of run `name` (settings changed by `overrides`) and the checkpoint it resumes from, if any."""
    trainer_class, config_class, rewards = DAPOTrainer, DAPOConfig, [HalfDegenerateReward(NUM_GENERATIONS)]
    settings = dict(per_device_train_batch_size=PER_DEVICE_BATCH, num_generations=NUM_GENERATIONS, max_steps=STEPS)
    kwargs, resume_from, output_name = {}, None, name
    if name not in ("published", "dr_grpo", "drop"):  # DrGRPOConfig has no skipping field; "drop" has no rounds
        settings.update(skip_degenerate_prompts=True)
    if name in ("defaults", "resumed"):
        settings.update(max_steps=RESUME_STEPS, save_strategy="steps", save_steps=SAVE_STEPS)
    if name == "resumed":
        settings.update(save_strategy="no")
        output_name, resume_from = "defaults", str(out_dir / "defaults" / f"checkpoint-{SAVE_STEPS}")
    elif name == "published":
        settings.update(DAPO_AS_PUBLISHED)
    elif name == "dr_grpo":
        trainer_class, config_class = DrGRPOTrainer, DrGRPOConfig
    elif name == "capped":
        settings.update(max_rows_per_generate_call=GENERATE_CALL_CAP)
    elif name == "bf16":  # the float32 policy under bf16 mixed precision, as TRL loads a model given by name
        settings.update(bf16=True)
    elif name == "reward_model":
        rewards.append(str(out_dir / REWARD_MODEL))
    elif name == "lora":
        kwargs["peft_config"] = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    elif name == "drop":
        rewards = [RankSkewedReward(NUM_GENERATIONS, rank)]
        settings.update(dynamic_sampling="drop")
    elif name == "uneven":
        rewards = [RankSkewedReward(NUM_GENERATIONS, rank)]
        settings.update(per_device_train_batch_size=UNEVEN_PER_DEVICE_BATCH, ds3_gather_for_generation=False)
    config = toy_config(config_class, out_dir / output_name, **{**settings, **overrides})
    engine.configure(config)
    trainer = trainer_class(
        copy.deepcopy(pristine), rewards, args=config, train_dataset=task.train_dataset,
        processing_class=task.tokenizer, **kwargs,
    )  # fmt: skip
    engine.adjust(trainer)
    if name == "uneven" and rank == 1:
        trainer.generation_config.min_new_tokens = config.max_completion_length
    return trainer, resume_from


def recording_generate_calls(trainer) -> list[int]:
    """The rows of every call of the policy's `generate`, in order, appended while the trainer runs."""
    rows, generate = [], trainer.model.generate

    def recording(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)

    trainer.model.generate = recording
    return rows


def training_logs(trainer) -> list[dict]:
    """The logged training steps, without the timings that differ from run to run."""
    return [
        {k: v for k, v in entry.items() if k not in ("step_time", "train_runtime") and "_per_second" not in k}
        for entry in trainer.state.log_history
        if "loss" in entry
    ]


def run(name: str, task, pristine, out_dir: Path, rank: int, engine: Engine) -> None:
    trainer, resume_from = build_run(name, task, pristine, out_dir, rank, engine)
    before = engine.weight_sums(trainer.model)
    generate_rows = recording_generate_calls(trainer)
    steps: list[dict] = []
    with recording_steps(trainer, steps):
        trainer.train(resume_from_checkpoint=resume_from)
    record = {
        "rank": trainer.accelerator.process_index,
        "num_processes": trainer.accelerator.num_processes,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "reward_engines": [type(func).__name__ for func in trainer.reward_funcs],
        **engine.record(trainer),
        "global_step": trainer.state.global_step,
        "weights_before": before,
        "weights_after": engine.weight_sums(trainer.model),
        "generate_rows": generate_rows,
        "steps": steps,
        "logs": training_logs(trainer),
    }
    (out_dir / f"{name}_rank{record['rank']}.json").write_text(json.dumps(record))


def warm_task(runs: list[str], out_dir: Path):
    """The toy task and a pristine copy of its policy, and the reward model saved where a run needs it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # The rewards are keyed on the prompt, so the policy's skill is irrelevant: a short warm start saves time.
    task = make_toy_task(seed=0, warm_start_steps=10)
    pristine = copy.deepcopy(task.model)
    if "reward_model" in runs:
        save_reward_model(out_dir / REWARD_MODEL, task)
    return task, pristine


def end_process_group() -> None:
    """Tears the gloo group down while both ranks are alive; left to interpreter exit, its threads can abort a
    rank."""
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
