"""Runs `DAPOTrainer` with carrying on two processes three times from the same warm-started policy and seed, and
records per rank what each step generated, decided, moved and trained.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dynamic_sampling/scripts/two_process_exchange.py --out DIR

- "planned": the row exchange as shipped (`exchange.plan_exchange`), checkpointing at step 2;
- "in_order": the batch laid out as before the exchange existed: carried groups then selected ones, in order,
  rank `p` training rows `[p * b, (p + 1) * b)` (every rank then held every row);
- "resumed": "planned" resumed from its step-2 checkpoint, while groups are carried into step 3.

Each rank writes `DIR/<run>_rank<r>.json`; tests/dynamic_sampling/test_exchange_multiprocess.py compares them.
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

import torch  # noqa: E402

import trl_variants.dynamic_sampling.placement as placement  # noqa: E402
from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward  # noqa: E402
from tests.dynamic_sampling.scripts.step_records import recording_steps  # noqa: E402
from tests.helpers import toy_config  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.dynamic_sampling.placement import ExchangePlan, plan_exchange  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8  # two processes: 16 rows, 4 groups per step
STEPS = 4


def plan_in_batch_order(holders, rows_per_process, num_processes):
    """The layout before the exchange: group k fills slot k, whatever process holds its rows."""
    group_size = len(holders[0])
    positions = [[group * group_size + row for row in range(group_size)] for group in range(len(holders))]
    return ExchangePlan(order=list(range(len(holders))), positions=positions, rows_per_process=rows_per_process)


def run(name: str, task, pristine, out_dir: Path, resume_from: str | None = None) -> None:
    placement.plan_exchange = plan_in_batch_order if name == "in_order" else plan_exchange
    model = copy.deepcopy(pristine)
    config = toy_config(
        DAPOConfig,
        out_dir / ("planned" if name == "resumed" else name),
        per_device_train_batch_size=PER_DEVICE_BATCH,
        num_generations=NUM_GENERATIONS,
        max_steps=STEPS,
        dynamic_sampling_carry_surplus=True,
        save_strategy="steps" if name == "planned" else "no",
        save_steps=2,
    )
    trainer = DAPOTrainer(
        model, [HalfDegenerateReward(NUM_GENERATIONS)], args=config, train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )  # fmt: skip
    steps = []
    exchange_rows = trainer.dynamic_sampler.exchange_rows

    def counting_exchange(outgoing, senders):
        received = exchange_rows(outgoing, senders)
        pending.append(sum(len(rows) for rows in outgoing.values()))
        return received

    pending: list[int] = []
    trainer.dynamic_sampler.exchange_rows = counting_exchange
    try:
        with recording_steps(trainer, steps):
            trainer.train(resume_from_checkpoint=resume_from)
    finally:
        placement.plan_exchange = plan_exchange
    for step, sent in zip(steps, pending, strict=True):
        step["sent_rows"] = sent
    rank = trainer.accelerator.process_index
    record = {
        "rank": rank,
        "steps": steps,
        "logs": [
            {k: v for k, v in entry.items() if k.startswith("dynamic_sampling/") or k in ("loss", "step")}
            for entry in trainer.state.log_history
            if "dynamic_sampling/rounds" in entry
        ],
    }
    (out_dir / f"{name}_rank{rank}.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    task = make_toy_task(seed=0, warm_start_steps=10)
    pristine = copy.deepcopy(task.model)
    run("planned", task, pristine, args.out)
    run("in_order", task, pristine, args.out)
    run("resumed", task, pristine, args.out, resume_from=str(args.out / "planned" / "checkpoint-2"))
    # Tear the gloo group down while both ranks are alive; left to interpreter exit, its threads can abort a rank.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
