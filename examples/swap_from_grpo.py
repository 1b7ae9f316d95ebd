"""Swapping TRL's GRPOTrainer for DAPOTrainer or DrGRPOTrainer changes two names and nothing else.

    python examples/swap_from_grpo.py            # trains the offline toy policy with all three, a few steps each

A GRPO script:

    from trl import GRPOConfig, GRPOTrainer
    args = GRPOConfig("out", learning_rate=1e-6, num_generations=8)
    trainer = GRPOTrainer(model, reward_funcs, args=args, train_dataset=dataset)

becomes DAPO by importing `DAPOConfig, DAPOTrainer` from trl_variants instead (its defaults are the paper's:
clip-higher, token-level loss, no KL, dynamic sampling), or Dr.GRPO with `DrGRPOConfig, DrGRPOTrainer`. Every
GRPOConfig field and GRPOTrainer argument keeps working.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

PAIRS = [(GRPOConfig, GRPOTrainer), (DAPOConfig, DAPOTrainer), (DrGRPOConfig, DrGRPOTrainer)]


def train(config_class, trainer_class, output_dir: str, steps: int):
    task = make_toy_task(seed=0)  # stands in for your model and dataset
    args = config_class(
        output_dir,  # the same arguments for all three classes
        use_cpu=True,
        bf16=False,  # TRL's default bf16=True would train in bfloat16 autocast, slow without CPU bf16 support
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=6,
        learning_rate=1e-3,
        max_steps=steps,
        report_to=[],
        save_strategy="no",
    )
    trainer = trainer_class(
        task.model, task.reward_funcs, args=args, train_dataset=task.train_dataset, processing_class=task.tokenizer
    )
    trainer.train()
    return trainer


def main(output_dir: str = "outputs/swap", steps: int = 5) -> list:
    # The toy policy's 64-wide matrices gain nothing from a second thread and lose a lot to synchronisation
    # on a busy machine (as in `trl-variants demo`): one thread is about 2.5x faster on 2 cores.
    torch.set_num_threads(1)
    trainers = []
    for config_class, trainer_class in PAIRS:
        trainer = train(config_class, trainer_class, os.path.join(output_dir, trainer_class.__name__), steps)
        print(
            f"{trainer_class.__name__}: loss_type={trainer.args.loss_type}, scale_rewards={trainer.args.scale_rewards}"
        )
        trainers.append(trainer)
    return trainers


if __name__ == "__main__":
    main()
