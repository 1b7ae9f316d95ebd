"""Runs `DAPOTrainer` with `dynamic_sampling_carry_surplus=True` in each process of a torchrun launch and records,
per rank, its share of the batches, the carried rows it holds and how far the old log-probs TRL's loss receives are
from the policy that generated each row.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dynamic_sampling/scripts/two_process_carry.py --out DIR \
        [--steps_per_generation S]

With `--steps_per_generation 4` each generation batch (the same 16 rows) trains four optimizer updates of 2 rows per
process.

Each rank writes `DIR/carry_rank<r>.json`; tests/dynamic_sampling/test_carry.py compares the ranks.
"""

import argparse
import copy
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch

from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward
from tests.helpers import toy_config  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.toy import make_toy_task

NUM_GENERATIONS = 4
GENERATION_ROWS = 8  # per process; two processes: 16 rows, 4 groups per generation batch
STEPS = 4  # generation batches


def completion_logps(model, prompt_ids, completion_ids) -> torch.Tensor:
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt_ids) - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--steps_per_generation", type=int, default=1)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    task = make_toy_task(seed=0, warm_start_steps=10)
    pristine = copy.deepcopy(task.model)
    config = toy_config(
        DAPOConfig,
        args.out / "carry",
        per_device_train_batch_size=GENERATION_ROWS // args.steps_per_generation,
        steps_per_generation=args.steps_per_generation,
        num_generations=NUM_GENERATIONS,
        max_steps=STEPS * args.steps_per_generation,
        dynamic_sampling_carry_surplus=True,
    )
    trainer = DAPOTrainer(
        task.model, [HalfDegenerateReward(NUM_GENERATIONS)], args=config, train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )  # fmt: skip
    steps = []
    # The policy's no-grad log-prob forwards (TRL's log-prob call passes `labels`; generation does not): under ZeRO-3
    # or FSDP each is a collective, so both ranks must make as many, although they hold different carried rows.
    logps_forwards = {"calls": 0, "rows": 0}

    def count_logps_forward(module, forward_args, kwargs):
        if "labels" in kwargs and not torch.is_grad_enabled():
            logps_forwards["calls"] += 1
            logps_forwards["rows"] += kwargs["input_ids"].shape[0]

    trainer.model.register_forward_pre_hook(count_logps_forward, with_kwargs=True)
    sample = trainer.dynamic_sampler.sample_batch
    compute_loss = trainer._compute_loss

    def recording_sample(inputs, trl_generate_and_score):
        policy = copy.deepcopy(pristine)
        policy.load_state_dict(trainer.model.state_dict())
        batch = sample(inputs, trl_generate_and_score)
        steps.append(
            {
                "policy": policy,
                "batch": [[row.prompt_ids, row.completion_ids] for row in batch.local],
                "carried_out": [[row.prompt_ids, row.completion_ids] for group in trainer.dynamic_sampler.carried for row in group],
                "loss_rows": 0,
                "carried_error": [],
                "fresh_error": [],
            }
        )
        return batch

    def recording_loss(model, inputs):
        # Checked after the loss, on the old log-probs it used: it fills fresh rows' from its own forward.
        loss = compute_loss(model, inputs)
        step = len(steps) - 1
        record = steps[step]
        record["loss_rows"] += int(inputs["prompt_ids"].shape[0])
        carried = steps[step - 1]["carried_out"] if step else []
        for i in range(inputs["prompt_ids"].shape[0]):
            prompt = inputs["prompt_ids"][i][inputs["prompt_mask"][i].bool()].tolist()
            completion = inputs["completion_ids"][i][inputs["completion_mask"][i].bool()].tolist()
            if "old_per_token_logps" not in inputs:
                assert not carried, "a batch with carried rows reached the loss without old log-probs"
                continue
            old = inputs["old_per_token_logps"][i, : len(completion)]
            if [prompt, completion] in carried:
                generating = completion_logps(steps[step - 1]["policy"], prompt, completion)
                record["carried_error"].append(float((old - generating).abs().max()))
            else:
                current = completion_logps(record["policy"], prompt, completion)
                record["fresh_error"].append(float((old - current).abs().max()))
        return loss

    trainer.dynamic_sampler.sample_batch = recording_sample
    trainer._compute_loss = recording_loss
    trainer.train()
    for step in steps:
        del step["policy"]
    rank = trainer.accelerator.process_index
    record = {
        "rank": rank,
        "global_step": trainer.state.global_step,
        "no_grad_logps_forwards": logps_forwards,
        "steps": steps,
        "logs": [
            {k: v for k, v in entry.items() if k.startswith("dynamic_sampling/")}
            for entry in trainer.state.log_history
            if "dynamic_sampling/rounds" in entry
        ],
        # Logged at every optimizer step that trains carried rows, generation step or not.
        "ratio_logs": [
            {k: v for k, v in entry.items() if k.startswith("dynamic_sampling/carried_ratio")}
            for entry in trainer.state.log_history
        ],
    }
    (args.out / f"carry_rank{rank}.json").write_text(json.dumps(record))
    # Tear the gloo group down while both ranks are alive; left to interpreter exit, its threads can abort a rank.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
