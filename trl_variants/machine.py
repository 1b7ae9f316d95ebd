"""Which machine printed a figure.

Trained numbers (accuracies, losses) follow the CPU's floating-point arithmetic: the same seed takes another
trajectory on another processor, instruction set or torch build. Every figure the package prints for people to
quote names the machine that printed it, in the one line `describe_machine()` returns.
"""

import os
import platform


def cpu_model() -> str:
    """The processor's model name as `/proc/cpuinfo` gives it (e.g. `AMD EPYC`), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def usable_cpus() -> int:
    """CPUs this process may run on; unlike GNU `nproc` it ignores OMP_NUM_THREADS, which the benchmarks set."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe_machine() -> str:
    """`AMD EPYC, 2 CPUs, AVX2 kernels, torch 2.13.0+cpu`: what decides a CPU run's floating-point trajectory."""
    import torch

    return (
        f"{cpu_model()}, {usable_cpus()} CPUs, {torch.backends.cpu.get_cpu_capability()} kernels, "
        f"torch {torch.__version__}"
    )
