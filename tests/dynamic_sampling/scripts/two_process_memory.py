"""Runs `DAPOTrainer` in each process of a torchrun launch with the device's memory readings scripted: rank 0's
measured calls allow one generation batch per call, rank 1's three. Each rank records the rows of each round and of
each model `generate` call it made.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/dynamic_sampling/scripts/two_process_memory.py --out DIR

Each rank writes `DIR/rank<r>.json`; tests/dynamic_sampling/test_generation_memory.py compares the ranks. With
`--fail_on_rank R`, rank R's generate raises in the second round, and every rank must stop with its message.
"""

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward  # noqa: E402
from tests.dynamic_sampling.test_generate_calls import watch_generate  # noqa: E402
from tests.dynamic_sampling.test_generation_memory import free_allowing, scripted_memory  # noqa: E402
from tests.helpers import toy_config  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8  # the generation batch per process: two groups
STEPS = 3


@contextlib.contextmanager
def free_memory_allowing(allowed_rows: int):
    """Replaces the device's memory readings (which a CPU does not have) with scripted ones whose measured calls
    allow exactly `allowed_rows` rows per call (tests/dynamic_sampling/test_generation_memory.py), for as long as
    the context lasts."""
    patch = pytest.MonkeyPatch()
    try:
        scripted_memory(patch, free_allowing(allowed_rows))
        yield
    finally:
        patch.undo()


def main() -> None:
    parser = argparse.ArgumentParser(description="Two ranks with different free memory; records their calls.")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--fail_on_rank", type=int, default=None, help="that rank's generate raises in round 2")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    allowed_rows = PER_DEVICE_BATCH * (1 + 2 * rank)
    with free_memory_allowing(allowed_rows):
        task = make_toy_task(seed=0)
        config = toy_config(
            DAPOConfig, args.out / "run", per_device_train_batch_size=PER_DEVICE_BATCH, num_generations=NUM_GENERATIONS,
            max_steps=STEPS,
        )  # fmt: skip
        trainer = DAPOTrainer(
            task.model, [HalfDegenerateReward(NUM_GENERATIONS)], args=config, train_dataset=task.train_dataset,
            processing_class=task.tokenizer,
        )  # fmt: skip
        fails = args.fail_on_rank == rank
        log = watch_generate(trainer, lambda rows, log: fails and len(log.turn_rows) == 2, error=ValueError("boom"))
        trainer.train()
    record = {
        "allowed_rows": allowed_rows, "batch_rows": PER_DEVICE_BATCH, "turns": log.turns, "turn_rows": log.turn_rows,
        "planned": trainer.dynamic_sampler.calls.last_plan,
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(record))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
