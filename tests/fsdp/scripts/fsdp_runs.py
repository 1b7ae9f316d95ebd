"""Trains the package's trainers under FSDP on every process of a launch (tests/fsdp/launch.py) and records, per
rank, the FSDP wrapping in use, the weights before and after, the logs and, under dynamic sampling, what each step
generated, decided and trained (tests/dynamic_sampling/scripts/step_records.py).

    PYTHONPATH=. HF_HUB_OFFLINE=1 accelerate launch --num_processes 2 --mixed_precision no \\
        --config_file <trl>/accelerate_configs/fsdp2.yaml tests/fsdp/scripts/fsdp_runs.py --out DIR --runs ...

The runs are those of tests/dynamic_sampling/scripts/sharded_runs.py; "planned", the defaults with each rank's
free-memory reading replaced (rank 0's fits one generation batch per call, rank 1's three), so that the memory plan
acts and the ranks must agree on it; and two that end the launch:

- "out_of_memory": one training step in which rank 0's first `generate` call raises CUDA's out-of-memory error;
- "one_rank_forward": one training step, then a forward of the sharded policy on rank 1 only, while rank 0 waits
  without any collective for rank 1 to report that its forward finished. A sharded forward gathers the
  parameters from both processes, so rank 1's cannot finish: the launch must hang.

THE OVERRIDE (CPU only): accelerate never builds FSDP on CPU processes. With `use_cpu=True` it sets up gloo
processes of type `DistributedType.MULTI_CPU` and turns to FSDP only from GPU-like types, so TRL's fsdp YAMLs
silently give data parallel (DDP). `take_accelerates_fsdp_branch` relabels that gloo state `MULTI_GPU` before the
trainer builds its `Accelerator`, which then takes its FSDP branch and shards the model over the gloo processes. It
exists only because these tests run on CPU processes; on GPUs accelerate builds FSDP from the YAML by itself and no
override is used. Two more CPU-only overrides let FSDP1 save TRL's FULL_STATE_DICT checkpoints on CPU processes
(`keep_fsdp1_state_dicts_in_place`, `Fsdp.adjust`); FSDP2 needs neither.
"""

import argparse
import os
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp._flat_param import FlatParamHandle
from torch.distributed.tensor import DTensor

from tests.dynamic_sampling.scripts.sharded_runs import (
    PER_DEVICE_BATCH,
    build_run,
    end_process_group,
    run,
    sums,
    warm_task,
)
from tests.dynamic_sampling.scripts.two_process_memory import free_memory_allowing

CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (simulated on rank 0)"
FORWARD_STARTED = "rank 1: a forward of the sharded policy on this process only"
FORWARD_FINISHED = "rank 1: the forward on this process only finished"


def take_accelerates_fsdp_branch() -> None:
    """THE CPU-ONLY OVERRIDE (see the module docstring): the gloo `MULTI_CPU` state the trainer's config built is
    relabelled `MULTI_GPU`, so that the `Accelerator` the trainer builds next takes its FSDP branch."""
    if PartialState().distributed_type == DistributedType.MULTI_CPU:
        PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU


def keep_fsdp1_state_dicts_in_place() -> None:
    """THE SECOND CPU-ONLY OVERRIDE, FSDP1 only, with `Fsdp.adjust`. To save a FULL_STATE_DICT checkpoint, accelerate
    gathers each parameter with `offload_to_cpu=True`, whatever its config says, and torch's FSDP1
    (`FlatParamHandle.to_cpu`) then "moves" the gathered parameter to the CPU and frees it on the compute device. On a
    GPU that is a copy; on a CPU process the move does nothing, so the state dict points to the memory just freed,
    and saving crashes with a segmentation fault. On CPU processes the gathered parameter is already where it is
    wanted, so it is left as it is. On GPUs no override is used."""
    move_to_cpu = FlatParamHandle.to_cpu

    @contextmanager
    def to_cpu(handle):
        if handle.device.type == "cpu":
            yield
        else:
            with move_to_cpu(handle):
                yield

    FlatParamHandle.to_cpu = to_cpu


def unprefixed(name: str) -> str:
    """A parameter's name without FSDP1's wrapper prefixes."""
    return name.replace("_fsdp_wrapped_module.", "")


class Fsdp:
    def configure(self, config) -> None:
        take_accelerates_fsdp_branch()

    def adjust(self, trainer) -> None:
        """CPU only, FSDP1 (see `keep_fsdp1_state_dicts_in_place`): the optimizer's FULL_STATE_DICT is gathered with
        `offload_to_cpu=True` too, which on a CPU process keeps, uncopied, buffers that torch then reuses: the saved
        optimizer state came out wrong here (the sum of |exp_avg| 0.002 instead of 9.2) and a resumed run diverged
        from the uninterrupted one from its second step. Off, the gathered state is copied."""
        plugin = trainer.accelerator.state.fsdp_plugin
        if plugin.fsdp_version == 1:
            plugin.optim_state_dict_config.offload_to_cpu = False

    def weight_sums(self, model) -> dict[str, list[float]]:
        if isinstance(model, FSDP):  # FSDP1: every parameter gathered whole for the duration
            with FSDP.summon_full_params(model, writeback=False):
                return sums((unprefixed(name), p) for name, p in model.named_parameters())
        return sums(
            (name, p.full_tensor() if isinstance(p, DTensor) else p) for name, p in model.named_parameters()
        )

    def record(self, trainer) -> dict:
        model, plugin = trainer.model_wrapped, trainer.accelerator.state.fsdp_plugin
        parameters = dict(model.named_parameters())
        # FSDP1 flattens each wrapped module's parameters into one; each process holds a shard of it.
        flat = [m._flat_param for m in model.modules() if isinstance(m, FSDP) and m._flat_param is not None]
        return {
            "fsdp_version": plugin.fsdp_version if plugin is not None else None,
            "wrapper": "FSDP2" if isinstance(model, FSDPModule) else type(model).__name__,
            "parameters": sorted(unprefixed(name) for name in parameters),
            # FSDP2: each parameter a DTensor sharded on dim 0, this process holding part of it.
            "dtensor_placements": sorted({str(p.placements) for p in parameters.values() if isinstance(p, DTensor)}),
            "dtensors": sum(isinstance(p, DTensor) for p in parameters.values()),
            "sharded": sum(isinstance(p, DTensor) and p.to_local().numel() < p.numel() for p in parameters.values()),
            "flat_parameters": len(flat),
            "flat_sharded": sum(p.numel() < p._unpadded_unsharded_size.numel() for p in flat),
            "reward_wrappers": [
                "FSDP2" if isinstance(f, FSDPModule) else type(f).__name__ for f in trainer.reward_funcs
            ],
        }


def out_of_memory(task, pristine, out_dir: Path, rank: int) -> None:
    """One step in which rank 0's first generate call runs out of memory (simulated before it draws anything)."""
    trainer, _ = build_run("defaults", task, pristine, out_dir, rank, Fsdp(), max_steps=1, save_strategy="no")
    generate = trainer.model.generate

    def failing(*args, **kwargs):
        if rank == 0:
            raise torch.OutOfMemoryError(CUDA_OOM)
        return generate(*args, **kwargs)

    trainer.model.generate = failing
    trainer.train()


def one_rank_forward(task, pristine, out_dir: Path, rank: int) -> None:
    """One step, then a forward on rank 1 only; rank 0 waits, without a collective, for rank 1's report."""
    trainer, _ = build_run("defaults", task, pristine, out_dir, rank, Fsdp(), max_steps=1, save_strategy="no")
    trainer.train()
    report = out_dir / "one_rank_forward_finished"
    if rank == 1:
        print(FORWARD_STARTED, flush=True)
        trainer.model(input_ids=torch.tensor([[1, 2, 3]]))
        print(FORWARD_FINISHED, flush=True)
        report.touch()
    while not report.exists():
        time.sleep(0.5)


def planned(task, pristine, out_dir: Path, rank: int) -> None:
    """The defaults with each rank's free-memory reading replaced: rank 0's fits one generation batch per call,
    rank 1's three. The ranks must agree on rank 0's cap, before either enters `generate`."""
    with free_memory_allowing(PER_DEVICE_BATCH * (1 + 2 * rank)):
        run("planned", task, pristine, out_dir, rank, Fsdp())


# Runs with a body of their own; "out_of_memory" and "one_rank_forward" end the launch.
OWN_RUNS = {"planned": planned, "out_of_memory": out_of_memory, "one_rank_forward": one_rank_forward}


def main() -> None:
    parser = argparse.ArgumentParser(description="Trains under FSDP and writes each rank's records.")
    parser.add_argument("--out", required=True, type=Path, help="folder of the records, the runs and checkpoints")
    parser.add_argument("--runs", required=True, help="comma-separated run names, in order")
    args = parser.parse_args()
    runs, rank = args.runs.split(","), int(os.environ["RANK"])
    keep_fsdp1_state_dicts_in_place()
    task, pristine = warm_task(runs, args.out)
    for name in runs:
        if name in OWN_RUNS:
            OWN_RUNS[name](task, pristine, args.out, rank)
        else:
            run(name, task, pristine, args.out, rank, Fsdp())
    end_process_group()


if __name__ == "__main__":
    main()
