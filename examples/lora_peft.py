"""DAPO with a LoRA adapter through PEFT: pass a `peft_config`, exactly as with GRPOTrainer.

    python examples/lora_peft.py

Only the adapter is trained and saved (`adapter_model.safetensors`), so a 7B model fits on one GPU. From the command
line the same is `trl-variants dapo --use_peft --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear ...`
(see examples/recipes/dapo_gsm8k_lora_1gpu.yaml).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from peft import LoraConfig  # noqa: E402

from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402


def main(output_dir: str = "outputs/toy-dapo-lora", steps: int = 20):
    # The toy policy's 64-wide matrices gain nothing from a second thread and lose a lot to synchronisation
    # on a busy machine (as in `trl-variants demo`): one thread is about 2.5x faster on 2 cores.
    torch.set_num_threads(1)
    task = make_toy_task(seed=0)  # stands in for a model such as Qwen/Qwen2.5-7B and a math dataset
    peft_config = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )
    args = DAPOConfig(
        output_dir,
        use_cpu=True,
        bf16=False,  # TRL's default bf16=True would train in bfloat16 autocast, slow without CPU bf16 support
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=6,
        learning_rate=5e-3,  # adapters take a larger learning rate than full fine-tuning
        max_steps=steps,
        report_to=[],
        save_strategy="no",
    )
    trainer = DAPOTrainer(
        task.model,
        task.reward_funcs,
        args=args,
        train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(output_dir)
    return trainer


if __name__ == "__main__":
    main()
