"""What a study writes: the machine and its load, JSON with rounded floats, Markdown tables, and the command line
that reproduces a report."""

import json
import os
import platform
import shlex
import sys

from trl_variants.machine import cpu_model, usable_cpus


def command_line(module: str, argv: list[str] | None = None) -> str:
    """`python -m MODULE ARGS...`: the command that reproduces a report (`argv` defaults to this process's)."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def load_average() -> str:
    """The 1-minute load average: on a shared machine it says how much other work the timings competed with."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def machine_description(num_threads: int, load_at_start: str) -> dict[str, str]:
    # Imported here, so that the scripts that only rewrite a report from its JSON start without them.
    import torch
    import transformers
    import trl

    description = {
        "cpu": cpu_model(),
        "nproc": str(usable_cpus()),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "torch threads": str(num_threads),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "load average at start": load_at_start,
        "load average at end": load_average(),
    }
    return description


def write_json(data, path: str, digits: int = 6) -> None:
    """Writes `data` with floats rounded to `digits` significant digits (the timings' noise is far larger)."""

    def rounded(value):
        if isinstance(value, float):
            return float(f"{value:.{digits}g}")
        if isinstance(value, dict):
            return {key: rounded(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [rounded(item) for item in value]
        return value

    with open(path, "w") as handle:
        json.dump(rounded(data), handle)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine_markdown(machine: dict[str, str]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in machine.items())
