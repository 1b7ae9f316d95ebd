"""DAPO with vLLM generating on the training GPUs ("colocate" mode), on one node.

    pip install "trl-variants[vllm]"
    accelerate launch --num_processes 8 examples/vllm_colocate.py

Each process runs its own vLLM engine next to the policy, sharing the GPU: `vllm_gpu_memory_utilization` is vLLM's
share of memory, and sleep mode frees it while the policy trains. Weights are synced into vLLM after every
optimisation step by TRL; DAPO's dynamic sampling generates its extra rounds through the same engine.
"""

from datasets import load_dataset

from trl_variants import DAPOConfig, DAPOTrainer, dapo_accuracy_reward

MODEL = "Qwen/Qwen2.5-7B"


def make_config(output_dir: str = "outputs/dapo-vllm-colocate", **overrides) -> DAPOConfig:
    settings = dict(
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.35,
        vllm_enable_sleep_mode=True,
        bf16=True,
        gradient_checkpointing=True,
        learning_rate=1e-6,
        # 32 prompts x 16 completions per generation round, trained on in 8 updates of 64 completions
        # (4 per device x 8 GPUs x 2 accumulation steps).
        num_generations=16,
        generation_batch_size=512,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_completion_length=4096,
        overlong_buffer_length=1024,
        logging_steps=1,
    )
    return DAPOConfig(output_dir, **{**settings, **overrides})


def main():
    dataset = load_dataset("open-r1/DAPO-Math-17k-Processed", "en", split="train")
    trainer = DAPOTrainer(MODEL, dapo_accuracy_reward, args=make_config(), train_dataset=dataset)
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
