"""DAPO with generation on a separate vLLM server ("server" mode): some GPUs generate, the others train.

On a node with 8 GPUs, start TRL's vLLM server on two of them:

    CUDA_VISIBLE_DEVICES=6,7 trl vllm-serve --model Qwen/Qwen2.5-7B --tensor_parallel_size 2

then train on the other six:

    CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 accelerate launch --num_processes 6 examples/vllm_server.py

The trainer sends prompts to the server, which returns completions, and pushes updated weights to it after every
optimisation step. DAPO's dynamic sampling sends its extra generation rounds to the same server.
"""

from datasets import load_dataset

from trl_variants import DAPOConfig, DAPOTrainer, dapo_accuracy_reward

MODEL = "Qwen/Qwen2.5-7B"


def make_config(
    output_dir: str = "outputs/dapo-vllm-server", host: str = "127.0.0.1", port: int = 8000, **overrides
) -> DAPOConfig:
    settings = dict(
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=f"http://{host}:{port}",
        vllm_server_timeout=600,
        bf16=True,
        gradient_checkpointing=True,
        learning_rate=1e-6,
        # 12 prompts x 16 completions per generation round, one update of 6 processes x 8 x 4 accumulation steps.
        num_generations=16,
        generation_batch_size=192,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
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
