"""Trains the package's trainers under DeepSpeed ZeRO on every process of a launch (tests/deepspeed/launch.py) and
records, per rank, the engine in use, the weights before and after, the logs and, under dynamic sampling, what each
step generated, decided and trained (tests/dynamic_sampling/scripts/step_records.py).

    PYTHONPATH=. HF_HUB_OFFLINE=1 DS_ACCELERATOR=cpu accelerate launch --num_processes 2 --mixed_precision no \\
        --config_file <trl>/accelerate_configs/zero3.yaml tests/deepspeed/scripts/zero_runs.py --out DIR --runs ...

The runs are those of tests/dynamic_sampling/scripts/sharded_runs.py; "uneven" sets `ds3_gather_for_generation=False`
there, so that every decoding step of rank 1 is a ZeRO-3 collective rank 0 must join.
"""

import argparse
import os
from pathlib import Path

import deepspeed

from tests.dynamic_sampling.scripts.sharded_runs import end_process_group, run, sums, warm_task


class Zero:
    def configure(self, config) -> None:
        """Under ZeRO-3, DeepSpeed keeps each parameter of fewer than `stage3_param_persistence_threshold` elements
        (1e5 by default) whole on every process, outside its collectives: every parameter of the toy model. At 0,
        the toy's parameters are partitioned as a real model's large matrices are, so that every forward gathers
        them collectively, as on a real model: a forward made on one process only then hangs the run."""
        zero = config.deepspeed_plugin.deepspeed_config["zero_optimization"]
        if zero["stage"] == 3:
            zero["stage3_param_persistence_threshold"] = 0

    def adjust(self, trainer) -> None:
        pass

    def weight_sums(self, model) -> dict[str, list[float]]:
        parameters = dict(model.named_parameters())
        with deepspeed.zero.GatheredParameters(list(parameters.values()), modifier_rank=None):
            return sums(parameters.items())

    def record(self, trainer) -> dict:
        engine = trainer.model_wrapped
        return {
            "engine": type(engine).__name__,
            "zero_stage": engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None,
            # ZeRO-3's parameters: partitioned (`ds_numel`) and none kept whole on every process (`ds_persist`).
            "partitioned": [name for name, p in trainer.model.named_parameters() if hasattr(p, "ds_numel")],
            "persistent": [name for name, p in trainer.model.named_parameters() if getattr(p, "ds_persist", False)],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="Trains under DeepSpeed ZeRO and writes each rank's records.")
    parser.add_argument("--out", required=True, type=Path, help="folder of the records, the runs and checkpoints")
    parser.add_argument("--runs", required=True, help="comma-separated run names, in order")
    args = parser.parse_args()
    runs = args.runs.split(",")
    task, pristine = warm_task(runs, args.out)
    for name in runs:
        run(name, task, pristine, args.out, int(os.environ["RANK"]), Zero())
    end_process_group()


if __name__ == "__main__":
    main()
