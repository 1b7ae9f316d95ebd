"""Runs `DAPOTrainer` with dynamic sampling in each process of a torchrun launch and records, per rank, every
keep/drop decision and the rows each process trains on (its share of the batch after the row exchange).

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dynamic_sampling/scripts/two_process.py --out DIR

Runs follow each other in the same process group, as DAPO is published (no prompt skipping, no carrying) unless
said otherwise: one with a reward that makes about half the groups degenerate, one with an always-degenerate reward that exhausts the rounds and falls back to filling, the first
again with `skip_degenerate_prompts=True` (streak rule, then posterior rule), which also records each rank's prompt
history and skip decisions, the first with skipping on a streaming dataset, and a stream that has no prompt left to
refill from, tool calling in an environment with skipping and carrying on, and the first
again with six rows per process, so that the dataloader's groups straddle the
processes. Each rank writes `DIR/<run>_rank<r>.json`; tests/dynamic_sampling/test_multiprocess.py compares the ranks.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import trl_variants.dynamic_sampling.sampler as sampler_module  # noqa: E402
import trl_variants.dynamic_sampling.trl_hooks as trl_hooks  # noqa: E402
from tests.dynamic_sampling.scripts.chat_models import (  # noqa: E402
    CountingEnvironment,
    make_episode_reward,
    tool_call_task,
)
from tests.dynamic_sampling.scripts.rewards import ConstantReward, HalfDegenerateReward  # noqa: E402
from tests.helpers import DAPO_AS_PUBLISHED, toy_config  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8  # two processes: 16 rows, 4 groups per step
SPLIT_PER_DEVICE_BATCH = 6  # two processes: 12 rows, 3 groups per step, one of them on both processes
STEPS = 3
MAX_ROUNDS = 3

# Every decision of this process (on every group's flags, in generation order), appended by the wrapper below.
decisions: list[dict] = []
_decide_round = sampler_module.decide_round


def recording_decide_round(informative, needed, fill, carry_capacity):
    decision = _decide_round(informative, needed, fill, carry_capacity)
    decisions.append({"informative": list(informative), "kept": decision.kept, "filled": decision.filled})
    return decision


sampler_module.decide_round = recording_decide_round

# What phase 2 hands TRL as the batch's rewards: the gather of each rank's trained rows' rewards.
gathered_rewards: list[list] = []
_gather = trl_hooks.gather


def recording_gather(tensor):
    gathered = _gather(tensor)
    gathered_rewards.append(gathered.tolist())
    return gathered


trl_hooks.gather = recording_gather


def run(name: str, reward, task, out_dir: Path, train_dataset=None, per_device=PER_DEVICE_BATCH, **config_overrides):
    decisions.clear()
    config = toy_config(
        DAPOConfig,
        out_dir / name,
        per_device_train_batch_size=per_device,
        num_generations=NUM_GENERATIONS,
        max_steps=STEPS,
        dynamic_sampling_max_rounds=MAX_ROUNDS,
        # DAPO as published unless a run turns an option on: the tests recompute each step's selection from it.
        **{**DAPO_AS_PUBLISHED, **config_overrides},
    )
    trainer = DAPOTrainer(
        task.model, [reward], args=config, train_dataset=train_dataset or task.train_dataset,
        processing_class=task.tokenizer,
    )  # fmt: skip
    batches, local_rows, loss_rows = [], [], []
    sample_informative = trainer.dynamic_sampler.sample_batch
    generate_and_score = trainer._generate_and_score_completions
    compute_loss = trainer._compute_loss

    def recording_sample_informative(inputs, trl_generate_and_score):
        batch = sample_informative(inputs, trl_generate_and_score)
        batches.append(
            {
                "prompts": [row.row["prompt"] for row in batch.local],
                "completion_ids": [row.completion_ids for row in batch.local],
                "rewards": [list(row.rewards) for row in batch.local],
            }
        )
        return batch

    def recording_generate_and_score(inputs):
        output = generate_and_score(inputs)
        batches[-1]["batch_rewards"] = gathered_rewards.pop()
        local_rows.append(
            {
                "rows": int(output["prompt_ids"].shape[0]),
                "prompts": task.tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True),
                "advantages": output["advantages"].tolist(),
            }
        )
        return output

    def recording_compute_loss(model, inputs):
        loss_rows.append(int(inputs["prompt_ids"].shape[0]))
        return compute_loss(model, inputs)

    trainer.dynamic_sampler.sample_batch = recording_sample_informative
    trainer._generate_and_score_completions = recording_generate_and_score
    trainer._compute_loss = recording_compute_loss
    picks = []
    if trainer.dynamic_sampler.skipper is not None:
        pick = trainer.dynamic_sampler.skipper.pick

        def recording_pick(first, needed, step):
            picked = pick(first, needed, step)
            picks.append({"first": list(first), "prompts": picked.prompts, "skipped": picked.skipped})
            return picked

        trainer.dynamic_sampler.skipper.pick = recording_pick
    trainer.train()

    record = {
        "rank": trainer.accelerator.process_index,
        "num_processes": trainer.accelerator.num_processes,
        "global_step": trainer.state.global_step,
        "decisions": list(decisions),
        "batches": batches,
        "local_rows": local_rows,
        "loss_rows": loss_rows,
        "picks": picks,
        "history": None
        if trainer.dynamic_sampler.skipper is None
        else {name: array.tolist() for name, array in trainer.dynamic_sampler.skipper.arrays_owner.arrays().items()},
        "explore_p": getattr(trainer, "_explore_p", None),
        "refill_state": trainer.dynamic_sampler.refill.state_dict(),
        "logs": [
            {k: v for k, v in entry.items() if k.startswith("dynamic_sampling/") or k == "step"}
            for entry in trainer.state.log_history
            if "dynamic_sampling/rounds" in entry
        ],
    }
    (out_dir / f"{name}_rank{record['rank']}.json").write_text(json.dumps(record))


def run_environment(out_dir: Path) -> None:
    """Tool calling in an environment: each rank resets and scores its own rollouts' episodes."""
    decisions.clear()
    model, tokenizer, dataset, bias = tool_call_task()
    CountingEnvironment.log = []
    scored = []
    config = toy_config(
        DAPOConfig, out_dir / "environment", per_device_train_batch_size=4, num_generations=NUM_GENERATIONS,
        max_steps=2, max_completion_length=112, max_tool_calling_iterations=1, shuffle_dataset=False,
        generation_kwargs={"sequence_bias": bias}, dynamic_sampling_max_rounds=MAX_ROUNDS,
        skip_degenerate_prompts=True,
    )  # fmt: skip
    trainer = DAPOTrainer(
        model, [make_episode_reward(scored)], args=config, train_dataset=dataset, processing_class=tokenizer,
        environment_factory=CountingEnvironment,
    )  # fmt: skip
    trainer.train()
    record = {
        "rank": trainer.accelerator.process_index,
        "decisions": list(decisions),
        "resets": len(CountingEnvironment.log),
        "scored_episodes": [entry["episode"] for entry in scored],
        "sees_observation": all(entry["sees_observation"] for entry in scored),
        "logs": [
            {k: v for k, v in entry.items() if k.startswith(("dynamic_sampling/", "tools/")) or k == "step"}
            for entry in trainer.state.log_history
            if "dynamic_sampling/rounds" in entry
        ],
    }
    (out_dir / f"environment_rank{record['rank']}.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    # The reward is keyed on the prompt, so the policy's skill is irrelevant: a short warm start saves time.
    task = make_toy_task(seed=0, warm_start_steps=10)
    run("half", HalfDegenerateReward(NUM_GENERATIONS), task, args.out)
    run("exhausted", ConstantReward(), task, args.out)
    # A large step takes p to its floor after the first step, so that the short run skips prompts.
    run(
        "skipping", HalfDegenerateReward(NUM_GENERATIONS), task, args.out,
        skip_degenerate_prompts=True, skip_predictor="streak", skip_probability_step=0.5,
    )  # fmt: skip
    run(
        "posterior", HalfDegenerateReward(NUM_GENERATIONS), task, args.out,
        skip_degenerate_prompts=True, skip_predictor="posterior",
    )  # fmt: skip
    # A stream: refills come from it, read by rank 0 and broadcast; then a stream of exactly one batch of prompts
    # with an always-degenerate reward, which has nothing to refill from.
    run(
        "stream", HalfDegenerateReward(NUM_GENERATIONS), task, args.out,
        train_dataset=task.train_dataset.to_iterable_dataset(), skip_degenerate_prompts=True,
    )  # fmt: skip
    run(
        "stream_dry", ConstantReward(), task, args.out,
        train_dataset=task.train_dataset.select(range(4)).to_iterable_dataset(), shuffle_dataset=False,
    )  # fmt: skip
    run_environment(args.out)
    # Six rows per process and groups of four: the dataloader's groups straddle the processes.
    run("split", HalfDegenerateReward(NUM_GENERATIONS), task, args.out, per_device=SPLIT_PER_DEVICE_BATCH)
    # Tear the gloo group down while both ranks are alive; left to interpreter exit, its threads can abort a rank.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    # Every record is written: leave without the interpreter's teardown, where a native thread's destructor has
    # still aborted a rank now and then ("terminate called without an active exception", exit -6).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
