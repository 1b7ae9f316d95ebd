"""How many rows a transformers `generate` call may hold, from the peak memory earlier calls of the run measured
(pure functions, but for `DeviceMemory`, which reads the device).

Every training call is measured: the device's peak allocated memory during the call above what was allocated when
it began (`CallPeak`). That peak holds whatever the call needed, whatever the architecture, the attention
implementation, autocast (float32 keys under bf16), the sampler or a vision tower: nothing is read from the model's
config. A later call of `rows` rows, prompts padded to `prompt_tokens` and up to `completion_tokens` new tokens is
predicted from a measured call `m` as

    predicted = m.peak_bytes * max(1, rows / m.rows) * max(1, (P + C) / (m.P + m.C), (P / m.P) ** 2)

which is never below the real peak where the call's memory is a fixed part (weights cast for autocast, ZeRO-3's
gathered parameters, workspaces) plus per-row parts that grow at most linearly with the tokens held (the KV cache,
with P + C) or quadratically with the prompt (an eager attention's prefill scores, with P): rows above a measured
call scale the whole peak, fixed part included, and a call is never predicted smaller than one it is no larger than.
`m.C` is the longest completion the measured call generated, so a call whose rows all stopped early is scaled up to
the full `max_completion_length`. Each measurement gives such an upper bound; the prediction is the smallest of
them (`call_rows`).

A round's calls then hold the most whole groups predicted to stay within the free memory (what the device reports
free plus what torch's caching allocator holds unused) less `MEMORY_MARGIN` of it, left for the allocator's
fragmentation, which the allocated peak does not count. The bound overstates the fixed part in proportion to the
rows (a call of twice the rows is predicted twice the weights' cast), so the first plans are cautious and grow as
larger calls are measured: each call's measurement tightens the next round's plan.

Before any call was measured, and on a device without the readings (CPU, MPS, or a backend lacking one of the
functions `DeviceMemory` uses), there is no plan: calls hold one generation batch per process, the call
`GRPOTrainer` makes, which fits wherever `GRPOTrainer` fits.
"""

from dataclasses import dataclass

import torch

# Share of the free memory no plan uses (see the module docstring).
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
    length = max(
        1.0,
        (prompt_tokens + completion_tokens) / max(measured_prompt + measured.completion_tokens, 1),
        (prompt_tokens / measured_prompt) ** 2,
    )
    return measured.peak_bytes * max(1.0, rows / measured.rows) * length


def call_rows(
    measurements: list[CallPeak], free_bytes: int, prompt_tokens: int, completion_tokens: int, unit: int, floor_rows: int
) -> int:
    """The most rows of a call, in whole `unit`s, that some measurement predicts to stay within `free_bytes` less the
    margin; never fewer than `floor_rows` (one generation batch, itself whole units)."""
    if unit < 1 or floor_rows < unit or floor_rows % unit:
        raise ValueError(f"call_rows: floor_rows ({floor_rows}) must be a positive multiple of unit ({unit}).")
    budget = max(free_bytes, 0) * (1 - MEMORY_MARGIN)
    best = 0
    for measured in measurements:
        at_measured = predicted_peak(measured, measured.rows, prompt_tokens, completion_tokens)
        if at_measured > budget:
            continue
        # Above the measured rows the bound grows in proportion to the rows.
        best = max(best, measured.rows, int(measured.rows * budget / at_measured) if at_measured > 0 else 0)
    return max(floor_rows, best // unit * unit)


class DeviceMemory:
    """The device readings a plan needs, from the torch backend of `device`'s type (`torch.cuda`, `torch.xpu`, ...):
    `available` is `None` on a device without them."""

    FUNCTIONS = ("mem_get_info", "memory_allocated", "memory_reserved", "max_memory_allocated", "reset_peak_memory_stats")

    def __init__(self, device: torch.device):
        self.device = device
        backend = getattr(torch, device.type, None) if device.type not in ("cpu", "meta") else None
        self.backend = backend if all(callable(getattr(backend, name, None)) for name in self.FUNCTIONS) else None

    def _read(self, name: str, *args):
        if self.backend is None:
            return None
        try:
            return getattr(self.backend, name)(self.device, *args)
        except (RuntimeError, NotImplementedError, AssertionError):  # a backend that has the function but not the stat
            self.backend = None
            return None

    def free(self) -> int | None:
        """Bytes this process can still allocate: the device's free memory plus what the caching allocator holds
        unused."""
        info, reserved, allocated = (self._read(n) for n in ("mem_get_info", "memory_reserved", "memory_allocated"))
        if info is None or reserved is None or allocated is None:
            return None
        return int(info[0] + reserved - allocated)

    def start(self) -> int | None:
        """Starts measuring a call: resets the peak and returns the memory allocated now."""
        allocated = self._read("memory_allocated")
        self._read("reset_peak_memory_stats")
        return allocated if self.backend is not None else None

    def peak_since(self, start: int | None) -> int | None:
        """The peak allocated memory since `start()`, above what was allocated then."""
        peak = self._read("max_memory_allocated") if start is not None else None
        return None if peak is None else max(int(peak) - start, 0)


class CallMeasurements:
    """The run's measured calls, and the rows per call they allow (see the module docstring)."""

    def __init__(self):
        self.calls: list[CallPeak] = []

    def add(self, call: CallPeak) -> None:
        self.calls = [*self.calls, call][-KEPT_MEASUREMENTS:]

    def rows(self, free_bytes: int | None, prompt_tokens: int, completion_tokens: int, unit: int, floor_rows: int) -> int | None:
        """Rows per call for a round, or `None` (no plan) before any measurement or without a free-memory reading."""
        if free_bytes is None or not self.calls:
            return None
        return call_rows(self.calls, free_bytes, prompt_tokens, completion_tokens, unit, floor_rows)
