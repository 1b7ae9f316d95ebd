"""Train with DAPO and publish the model and its model card on the Hugging Face Hub.

    hf auth login
    python examples/push_to_hub.py --hub_model_id your-name/toy-dapo

The model card names the variant (DAPO), its key settings (clip range, loss aggregation, overlong filtering and
punishment, dynamic sampling), the base model, the `trl-variants` and `dapo` tags and the paper's citation. From the
command line the same is `trl-variants dapo ... --push_to_hub --hub_model_id your-name/model`.
"""

import argparse

import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.toy import make_toy_task


def main(hub_model_id: str, output_dir: str = "outputs/toy-dapo-hub", steps: int = 20, private: bool = True):
    # The toy policy's 64-wide matrices gain nothing from a second thread and lose a lot to synchronisation
    # on a busy machine (as in `trl-variants demo`): one thread is about 2.5x faster on 2 cores.
    torch.set_num_threads(1)
    task = make_toy_task(seed=0)  # stands in for your model and dataset
    args = DAPOConfig(
        output_dir,
        push_to_hub=True,
        hub_model_id=hub_model_id,
        hub_private_repo=private,
        hub_strategy="end",  # one upload when training ends, not one per checkpoint
        use_cpu=True,
        bf16=False,  # TRL's default bf16=True would train in bfloat16 autocast, slow without CPU bf16 support
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=6,
        overlong_buffer_length=2,
        learning_rate=1e-3,
        max_steps=steps,
        report_to=[],
        save_strategy="no",
    )
    trainer = DAPOTrainer(
        task.model, task.reward_funcs, args=args, train_dataset=task.train_dataset, processing_class=task.tokenizer
    )
    trainer.train()
    # Saves the model, writes README.md (the model card) and uploads the folder.
    trainer.push_to_hub(dataset_name="trl_variants.toy")
    return trainer


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub_model_id", required=True, help="repository to create or update, e.g. your-name/toy-dapo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--public", action="store_true", help="create a public repository (private by default)")
    cli_args = parser.parse_args()
    main(cli_args.hub_model_id, steps=cli_args.steps, private=not cli_args.public)
