"""Trains `DAPOTrainer` under DeepSpeed ZeRO-3 on one process with gradient checkpointing, twice: once with the
model's `generate` raising CUDA's out-of-memory error in the first call of a whole generation batch (before it draws
anything), once with the halved size set as `max_rows_per_generate_call` from the start. Records, per run, the logs,
the failed calls and, at every loss computation, whether gradient checkpointing is on and how many forward hooks
DeepSpeed's ZeRO-3 engine holds (tests/deepspeed/test_zero3_oom_retry.py compares them).

    PYTHONPATH=. HF_HUB_OFFLINE=1 DS_ACCELERATOR=cpu accelerate launch --num_processes 1 --mixed_precision no \\
        --config_file <trl>/accelerate_configs/zero3.yaml tests/deepspeed/scripts/zero3_oom_retry.py --out DIR
"""

import argparse
import copy
import json
from pathlib import Path

import torch

from tests.deepspeed.scripts.zero_runs import Zero
from tests.dynamic_sampling.scripts.sharded_runs import training_logs
from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward
from tests.helpers import toy_config
from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.toy import make_toy_task

NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8  # one process: the generation batch, two groups
STEPS = 3
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB"


def run(name: str, task, pristine, out_dir: Path) -> None:
    cap = PER_DEVICE_BATCH // 2 if name == "capped" else None
    config = toy_config(
        DAPOConfig, out_dir / name, per_device_train_batch_size=PER_DEVICE_BATCH, num_generations=NUM_GENERATIONS,
        max_steps=STEPS, gradient_checkpointing=True, max_rows_per_generate_call=cap,
    )  # fmt: skip
    Zero().configure(config)  # every parameter partitioned, as a real model's are
    trainer = DAPOTrainer(
        copy.deepcopy(pristine), [HalfDegenerateReward(NUM_GENERATIONS)], args=config,
        train_dataset=task.train_dataset, processing_class=task.tokenizer,
    )  # fmt: skip
    failed, losses = [], []
    model_generate = trainer.model.generate

    def generate(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if name == "hit" and (rows >= PER_DEVICE_BATCH or trainer.state.global_step == STEPS) and not failed:
            failed.append(rows)
            raise torch.OutOfMemoryError(CUDA_OOM)
        return model_generate(*args, **kwargs)

    compute_loss = trainer._compute_loss

    def recording_compute_loss(model, inputs):
        engine = trainer.model_wrapped
        losses.append(
            {
                "checkpointing": trainer.accelerator.unwrap_model(engine).is_gradient_checkpointing,
                "forward_hooks": len(engine.optimizer.parameter_offload.forward_hooks),
            }
        )
        return compute_loss(model, inputs)

    trainer.model.generate = generate
    trainer._compute_loss = recording_compute_loss
    trainer.train()
    record = {"failed": list(failed), "after_raised": None}
    if name == "hit":
        # A call of one group that runs out of memory cannot be halved: the error goes to the caller, which may
        # catch it and go on; training must then be as it was.
        failed.clear()
        try:
            trainer._generate_single_turn([[1, 2, 3]] * NUM_GENERATIONS, None, {}, NUM_GENERATIONS)
        except RuntimeError as error:
            engine = trainer.model_wrapped
            record["after_raised"] = {
                "message": str(error),
                "checkpointing": trainer.accelerator.unwrap_model(engine).is_gradient_checkpointing,
                "forward_hooks": len(engine.optimizer.parameter_offload.forward_hooks),
            }
    record.update({
        "engine": type(trainer.model_wrapped).__name__,
        "zero_stage": trainer.model_wrapped.zero_optimization_stage(),
        "global_step": trainer.state.global_step,
        "losses": losses,
        "logs": training_logs(trainer),
    })
    (out_dir / f"{name}.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(description="ZeRO-3 runs with and without a simulated out-of-memory error.")
    parser.add_argument("--out", required=True, type=Path, help="folder of the records and the runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    task = make_toy_task(seed=0, warm_start_steps=10)
    pristine = copy.deepcopy(task.model)
    for name in ("hit", "capped"):
        run(name, task, pristine, args.out)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
