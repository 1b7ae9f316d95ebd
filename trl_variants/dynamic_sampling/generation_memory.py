"""The memory a transformers `generate` call needs, planned before the call (pure functions, but for the reading of
the device's free memory).

A call of `rows` rows, each with `prompt_tokens` (the call's padded prompt length) and up to `completion_tokens`
new tokens, holds per row:

- its KV cache: layers x KV heads x head dim x 2 (key and value) x dtype bytes x (prompt + completion tokens);
- the logits of the token being sampled: vocabulary x 4 bytes (float32) x `LOGITS_COPIES`, for the logits, the
  processed scores and the sampling probabilities (generate keeps the last position's logits only).

The rows that fit are those whose bytes stay within the device's free memory less `MEMORY_MARGIN` of it, which is
left for what the estimate leaves out: the prefill's activations, the allocator's fragmentation and the sampler's
temporaries. The plan never goes below one generation batch per process (`GRPOTrainer`'s call): where
`GRPOTrainer` fits, so does that call, and a call that still runs out of memory is halved by the out-of-memory
retry (generate_calls.py).

Free memory is what the device reports free plus what torch's caching allocator holds reserved but unused (memory
this process can reuse without asking the device). Devices without such a reading (CPU, MPS) get no plan.
"""

import math
from dataclasses import dataclass

import torch

# Share of the free memory no plan uses (see the module docstring).
MEMORY_MARGIN = 0.2
# Vocabulary-sized float32 tensors alive per row while a token is sampled.
LOGITS_COPIES = 3
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class DecoderShape:
    """What a decoder's per-row generation memory depends on."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    dtype_bytes: int


def decoder_shape(config, dtype_bytes: int) -> DecoderShape:
    """The shape of a transformers model config's text decoder (a vision-language model's text config)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    return DecoderShape(
        num_layers=text.num_hidden_layers,
        num_kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        vocab_size=text.vocab_size,
        dtype_bytes=dtype_bytes,
    )


def kv_cache_bytes(shape: DecoderShape, tokens: int) -> int:
    """One row's KV cache over `tokens` tokens."""
    return shape.num_layers * shape.num_kv_heads * shape.head_dim * 2 * shape.dtype_bytes * tokens


def logits_bytes(shape: DecoderShape) -> int:
    """One row's vocabulary-sized tensors while a token is sampled."""
    return shape.vocab_size * FLOAT32_BYTES * LOGITS_COPIES


def row_bytes(shape: DecoderShape, prompt_tokens: int, completion_tokens: int) -> int:
    """The memory one row of a generate call needs at its longest."""
    return kv_cache_bytes(shape, prompt_tokens + completion_tokens) + logits_bytes(shape)


def planned_rows(free_bytes: int, bytes_per_row: int, unit: int, floor_rows: int) -> int:
    """Most rows of a call, in whole `unit`s, whose memory stays within `free_bytes` less the margin; never fewer
    than `floor_rows` (one generation batch, itself whole units)."""
    if bytes_per_row < 1 or unit < 1 or floor_rows < unit or floor_rows % unit:
        raise ValueError(
            f"planned_rows: bytes_per_row ({bytes_per_row}) and unit ({unit}) must be >= 1 and floor_rows "
            f"({floor_rows}) a positive multiple of unit."
        )
    usable = int(max(free_bytes, 0) * (1 - MEMORY_MARGIN))
    return max(floor_rows, usable // bytes_per_row // unit * unit)


def free_bytes_for(rows: int, bytes_per_row: int) -> int:
    """The free memory that plans exactly `rows` rows (the inverse of `planned_rows`, for tests and benchmarks)."""
    return math.ceil(rows * bytes_per_row / (1 - MEMORY_MARGIN)) + 1


def free_device_memory(device: torch.device) -> int | None:
    """Bytes this process can still allocate on `device`: the device's free memory plus what torch's caching
    allocator holds unused; `None` on a device without a memory reading (CPU, MPS)."""
    backend = getattr(torch, device.type, None)
    if device.type in ("cpu", "mps") or not hasattr(backend, "mem_get_info"):
        return None
    free, _ = backend.mem_get_info(device)
    cached = backend.memory_reserved(device) - backend.memory_allocated(device)
    return int(free + cached)
