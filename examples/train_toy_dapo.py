"""Train the embedded toy policy with DAPOTrainer on CPU, offline, in well under a minute.

    python examples/train_toy_dapo.py
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402


def main(output_dir: str = "outputs/toy-dapo", steps: int = 40) -> None:
    task = make_toy_task(seed=0)
    before = task.held_out_accuracy()
    args = DAPOConfig(
        output_dir,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=6,
        overlong_buffer_length=2,
        learning_rate=1e-3,
        max_steps=steps,
        logging_steps=5,
        report_to=[],
        save_strategy="no",
        seed=0,
    )
    trainer = DAPOTrainer(
        task.model, task.reward_funcs, args=args, train_dataset=task.train_dataset, processing_class=task.tokenizer
    )
    trainer.train()
    trainer.save_model(output_dir)
    after = task.held_out_accuracy(trainer.model)
    print(f"held-out greedy accuracy: before {before:.2f}, after {after:.2f}")


if __name__ == "__main__":
    main()
