"""How many rows a transformers `generate` call may hold, from the peak memory earlier calls of the run measured
(pure functions, but for `DeviceMemory`, which reads the device); docs/dynamic_sampling.md, "Generation calls and
memory", explains it. A call of `rows` rows, prompts padded to `P` and up to `C` new tokens is predicted from a
measured call `m` (`CallPeak`: its peak allocated memory above what was allocated when it began) as

    predicted = m.peak_bytes * max(1, rows / m.rows) * max(1, (P + C) / (m.P + m.C), (P / m.P) ** 2)

an upper bound wherever the peak is a fixed part plus per-row parts growing at most linearly with the tokens held
or quadratically with the prompt; nothing is read from the model's config.
"""

from dataclasses import dataclass

import torch

# Share of the free memory no plan uses, left for the caching allocator's fragmentation.
MEMORY_MARGIN = 0.1
# Measurements kept: the latest ones, enough to cover the prompt lengths a run's rounds see.
KEPT_MEASUREMENTS = 16


@dataclass(frozen=True)
class CallPeak:
    """One measured generate call: its rows, padded prompt length, longest completion and peak memory above the
    memory allocated when it began."""

    rows: int
    prompt_tokens: int
    completion_tokens: int
    peak_bytes: int


def predicted_peak(measured: CallPeak, rows: int, prompt_tokens: int, completion_tokens: int) -> float:
    """An upper bound on the peak of a call of `rows` rows, prompts of `prompt_tokens` and up to
    `completion_tokens` new tokens, from one measured call (the formula in the module docstring)."""
    measured_prompt = max(measured.prompt_tokens, 1)
    tokens_held = (prompt_tokens + completion_tokens) / max(measured_prompt + measured.completion_tokens, 1)
    length = max(1.0, tokens_held, (prompt_tokens / measured_prompt) ** 2)
    return measured.peak_bytes * max(1.0, rows / measured.rows) * length


def call_rows(measurements: list[CallPeak], free_bytes: int | None, prompt_tokens: int, completion_tokens: int,
              unit: int, floor_rows: int) -> int | None:  # fmt: skip
    """The most rows of a call, in whole `unit`s, that some measurement predicts to stay within `free_bytes` less the
    margin; never fewer than `floor_rows` (one generation batch, itself whole units). `None` (no plan) before any
    measurement or without a free-memory reading."""
    if free_bytes is None or not measurements:
        return None
    if unit < 1 or floor_rows < unit or floor_rows % unit:
        raise ValueError(f"call_rows: floor_rows ({floor_rows}) must be a positive multiple of unit ({unit}).")
    budget, best = max(free_bytes, 0) * (1 - MEMORY_MARGIN), 0
    for measured in measurements:
        at_measured = predicted_peak(measured, measured.rows, prompt_tokens, completion_tokens)
        if at_measured <= budget:  # above the measured rows, the bound grows in proportion to the rows
            best = max(best, measured.rows, int(measured.rows * budget / at_measured) if at_measured > 0 else 0)
    return max(floor_rows, best // unit * unit)


class DeviceMemory:
    """The device readings a plan needs, from the torch backend of `device`'s type (`torch.cuda`, `torch.xpu`, ...);
    every reading is `None` on a device without them (CPU, MPS), and from the first one that fails on."""

    FUNCTIONS = ("mem_get_info", "memory_allocated", "memory_reserved", "max_memory_allocated", "reset_peak_memory_stats")

    def __init__(self, device: torch.device):
        self.device = device
        backend = getattr(torch, device.type, None) if device.type not in ("cpu", "meta") else None
        self.backend = backend if all(callable(getattr(backend, name, None)) for name in self.FUNCTIONS) else None

    def _read(self, name: str):
        try:
            return None if self.backend is None else getattr(self.backend, name)(self.device)
        except (RuntimeError, NotImplementedError, AssertionError):  # a backend that has the function but not the stat
            self.backend = None

    def free(self) -> int | None:
        """Bytes this process can still allocate: the device's free memory plus what the caching allocator holds
        unused."""
        info, reserved, allocated = (self._read(n) for n in ("mem_get_info", "memory_reserved", "memory_allocated"))
        return None if info is None or reserved is None or allocated is None else int(info[0] + reserved - allocated)

    def start(self) -> int | None:
        """Starts measuring a call: resets the peak and returns the memory allocated now."""
        allocated = self._read("memory_allocated")
        self._read("reset_peak_memory_stats")
        return allocated if self.backend is not None else None

    def peak_since(self, start: int | None) -> int | None:
        """The peak allocated memory since `start()`, above what was allocated then."""
        peak = self._read("max_memory_allocated") if start is not None else None
        return None if peak is None else max(int(peak) - start, 0)
