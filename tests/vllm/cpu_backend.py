"""vLLM's CPU backend settings, shared by the vLLM tests and the scripts they launch. Importing this module sets
nothing and imports nothing heavy, so it can run before vLLM, TRL or torch are imported."""

import os


def use_cpu_backend_defaults() -> None:
    """1 GiB of KV cache and the engine's address on the loopback interface; the CPU target unless a GPU is named.
    Values already in the environment win; on a GPU machine these are ignored or harmless. Call it before the
    first engine starts."""
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
