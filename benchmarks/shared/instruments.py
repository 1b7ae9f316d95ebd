"""Instruments wrapped around a trainer: step times (`StepTimer`), time per named phase (`PhaseTimer`) and peak
memory (`PeakMemory`)."""

import ctypes
import functools
import gc
import threading
import time
from collections import defaultdict

import torch
from transformers import TrainerCallback


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepTimer(TrainerCallback):
    """Wall time and process CPU time of each optimizer step (generation, scoring, backward and optimizer
    update). On a shared machine the CPU time is the steadier of the two: other processes' load stretches the
    wall time but not the CPU time this process spends."""

    def __init__(self):
        self.durations: list[float] = []
        self.cpu_durations: list[float] = []
        self._start = self._cpu_start = None

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        self._start, self._cpu_start = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        self.durations.append(time.perf_counter() - self._start)
        self.cpu_durations.append(time.process_time() - self._cpu_start)


class PhaseTimer:
    """Accumulates wall time per named phase; `wrap_method` times a method of one trainer instance."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active: set[str] = set()

    def wrap_method(self, obj, method_name: str, phase) -> None:
        """Times `obj.method_name`; `phase` is a name or a function of this timer giving the name per call."""
        original = getattr(obj, method_name)
        setattr(obj, method_name, self.timed(original, phase, marks_active=method_name))

    def timed(self, func, phase, marks_active=None):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            name = phase(self) if callable(phase) else phase
            if marks_active:
                self.active.add(marks_active)
            synchronize()
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                synchronize()
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1
                if marks_active:
                    self.active.discard(marks_active)

        return wrapper


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _heap_in_use_reader():
    """Bytes currently allocated through malloc (glibc `mallinfo2`), or None where it is unavailable.

    Unlike the peak RSS, this falls when memory is freed, so trainers measured one after the other in the same
    process each get their own peak; torch's CPU tensors are allocated through malloc and are included.
    """
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2

    def read() -> int:
        info = mallinfo2()
        return info.uordblks + info.hblkhd

    return read


class PeakMemory:
    """Peak memory allocated above the level at `start()`: CUDA's allocator statistics on a GPU, otherwise the
    malloc heap sampled by a background thread every `interval` seconds."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.on_gpu = torch.cuda.is_available()
        self._read_heap = None if self.on_gpu else _heap_in_use_reader()
        self.available = self.on_gpu or self._read_heap is not None
        self.kind = "torch.cuda.max_memory_allocated" if self.on_gpu else "malloc heap in use (glibc mallinfo2)"

    def start(self) -> None:
        # Garbage of earlier runs freed mid-measurement would hide this run's allocations.
        gc.collect()
        if self.on_gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._baseline = torch.cuda.memory_allocated()
            return
        if self._read_heap is None:
            return
        self._baseline = self._peak = self._read_heap()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self._read_heap())
            time.sleep(self.interval)

    def stop(self) -> float | None:
        """Peak increase in MiB since `start()`, or None where memory cannot be measured."""
        if self.on_gpu:
            torch.cuda.synchronize()
            return (torch.cuda.max_memory_allocated() - self._baseline) / 2**20
        if self._read_heap is None:
            return None
        self._stop.set()
        self._thread.join()
        return (max(self._peak, self._read_heap()) - self._baseline) / 2**20
