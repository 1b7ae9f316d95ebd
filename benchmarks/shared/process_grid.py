"""Runs a benchmark's (arm, seed) runs as separate processes, a few at a time, for the resumable real-model runners.

Each run is `python -m MODULE run --arm ARM --seed SEED [extra arguments] [--deadline_unix T]` with its output
appended to `LOG_DIR/ARM-seedS.log`. Runs go seed-major (every arm of a seed before the next seed), so a grid stopped
early keeps whole seeds. With a deadline, the runner itself is expected to stop at an evaluation; one still going
`grace_s` after the deadline is killed, and its result file keeps every evaluation it finished.
"""

import os
import subprocess
import sys
import time

from benchmarks.shared.settings import REPO_ROOT


def run_grid(module: str, arms: list[str], seeds: list[int], *, workers: int, log_dir: str,
             extra_arguments: list[str], deadline_seconds: float | None = None, grace_s: float = 120.0,
             poll_s: float = 1.0, is_complete=None, no_start_within_s: float = 0.0) -> dict[str, int]:
    """Runs every (arm, seed) for which `is_complete(arm, seed)` is not true (a process would only load to find its
    result whole), `workers` at a time, prints a line as each starts and ends, and returns the exit code of each run
    it started by its name (`ARM-seedS`). With a deadline, no run starts later than `no_start_within_s` before it:
    such a run could not reach its first checkpoint, so its work would be lost."""
    if workers < 1:
        raise ValueError(f"run_grid: workers must be at least 1, got {workers}")
    deadline = time.time() + deadline_seconds if deadline_seconds else None
    os.makedirs(log_dir, exist_ok=True)
    pending = [(arm, seed) for seed in seeds for arm in arms if not (is_complete and is_complete(arm, seed))]
    running: dict[str, subprocess.Popen] = {}
    exit_codes: dict[str, int] = {}
    while pending or running:
        if pending and deadline and time.time() > deadline - no_start_within_s:
            names = ", ".join(f"{arm}-seed{seed}" for arm, seed in pending)
            print(f"{time.strftime('%H:%M:%S')} not started, the deadline is under {no_start_within_s:.0f} s away: "
                  f"{names}", flush=True)
            pending.clear()
        while pending and len(running) < workers:
            arm, seed = pending.pop(0)
            name = f"{arm}-seed{seed}"
            command = [sys.executable, "-m", module, "run", "--arm", arm, "--seed", str(seed), *extra_arguments,
                       *(["--deadline_unix", str(deadline)] if deadline else [])]
            with open(os.path.join(log_dir, f"{name}.log"), "a") as log:
                running[name] = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
            print(f"{time.strftime('%H:%M:%S')} {name}: started", flush=True)
        time.sleep(poll_s)
        for name, process in list(running.items()):
            if deadline and time.time() > deadline + grace_s and process.poll() is None:
                process.kill()
                process.wait()
            if process.poll() is not None:
                exit_codes[name] = running.pop(name).returncode
                print(f"{time.strftime('%H:%M:%S')} {name}: exit {exit_codes[name]}", flush=True)
    return exit_codes
