"""Run with `python train_until_terminated.py OUT_DIR`: trains the toy DAPO run, saving every 2 steps, until killed.

The test sends SIGTERM once a checkpoint exists and then resumes the run in its own process.
"""

import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

TERMINATED_RUN_SETTINGS = dict(
    use_cpu=True,
    per_device_train_batch_size=16,
    num_generations=4,
    max_completion_length=6,
    max_steps=10_000,
    logging_steps=1,
    save_strategy="steps",
    save_steps=2,
    save_total_limit=3,
    report_to=[],
    seed=0,
)


def main(out_dir: str) -> None:
    task = make_toy_task(seed=0, warm_start_steps=0)
    trainer = DAPOTrainer(
        task.model,
        task.reward_funcs,
        args=DAPOConfig(out_dir, **TERMINATED_RUN_SETTINGS),
        train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1])
