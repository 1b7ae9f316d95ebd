"""Seconds from starting `trl-variants dapo` to its error line, for three common mistakes: a negative learning
rate, an unknown reward name and a misspelt field.

Two arms run the same command lines in fresh processes, alternating (order reversed every repeat), so that machine
drift and other work hit both alike:
- `quick`: the command as shipped (`python -m trl_variants.cli dapo ...`), whose mistakes `quick_checks` reports
  before torch, transformers or TRL load;
- `full`: the full parse the command ran before the quick checks existed, and still runs for valid input: TRL's
  parser over the four dataclasses (`args.parse_command`), then the reward names (`registry.resolve_reward`).
Both must print the same error line; the script fails otherwise. It prints a Markdown table with the machine and
the load average before and after, which docs/benchmarks.md copies.

    python -m benchmarks.cli_errors.cli_errors              # 5 repeats
    python -m benchmarks.cli_errors.cli_errors --repeats 1  # a quick look
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trl_variants.machine import cpu_model, usable_cpus

REPO_ROOT = Path(__file__).resolve().parents[2]

MISTAKES = {
    "negative learning rate": ["--learning_rate", "-1e-6"],
    "unknown reward name": ["--reward_funcs", "nope"],
    "misspelt field": ["--epsilon_hihg", "0.28"],
}
# The full parse as `trl-variants` ran it before the quick checks: parse, then resolve the reward names.
FULL_PARSE = """
import sys
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.launch import accelerate_launch_options
from trl_variants.rewards.registry import RewardLookupError, resolve_reward
try:
    parsed = parse_command(VARIANTS["dapo"], sys.argv[1:], accelerate_launch_options())
    for name in parsed.script_args.reward_funcs:
        resolve_reward(name)
except (CliUsageError, RewardLookupError) as error:
    print(f"trl-variants: error: {' '.join(str(error).split())}", file=sys.stderr)
    sys.exit(2)
"""


def command_line(arm: str, flags: list[str], output_dir: str) -> list[str]:
    base = ["--model_name_or_path", "Qwen/Qwen2.5-0.5B", "--dataset_name", "openai/gsm8k", "--reward_funcs",
            "dapo_accuracy", "--output_dir", output_dir, "--use_cpu", "true", "--bf16", "false", *flags]  # fmt: skip
    if arm == "quick":
        return [sys.executable, "-m", "trl_variants.cli", "dapo", *base]
    return [sys.executable, "-c", FULL_PARSE, *base]


def seconds_to_error(command: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    elapsed = time.perf_counter() - started
    lines = [line for line in result.stderr.splitlines() if line.startswith("trl-variants: error:")]
    if result.returncode != 2 or len(lines) != 1:
        raise SystemExit(f"{command} did not end with one error line (exit {result.returncode}):\n{result.stderr}")
    return elapsed, lines[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    seconds = {(mistake, arm): [] for mistake in MISTAKES for arm in ("quick", "full")}
    with tempfile.TemporaryDirectory() as output_dir:
        for repeat in range(args.repeats):
            arms = ("quick", "full") if repeat % 2 == 0 else ("full", "quick")
            for mistake, flags in MISTAKES.items():
                errors = {}
                for arm in arms:
                    elapsed, errors[arm] = seconds_to_error(command_line(arm, flags, output_dir))
                    seconds[mistake, arm].append(elapsed)
                if errors["quick"] != errors["full"]:
                    raise SystemExit(f"{mistake}: the arms disagree:\n{errors['quick']}\n{errors['full']}")
    load_after = os.getloadavg()
    print(f"Machine: {cpu_model()}, {usable_cpus()} CPUs, Python {sys.version.split()[0]}. Load average (1, 5, 15 "
          f"min) {', '.join(f'{x:.1f}' for x in load_before)} before, {', '.join(f'{x:.1f}' for x in load_after)} "
          f"after. {args.repeats} repeats per arm; median [min, max] seconds from start to the error line.\n")  # fmt: skip
    print("| mistake | quick checks | full parse | full / quick |")
    print("|---|---|---|---|")
    for mistake in MISTAKES:
        quick, full = seconds[mistake, "quick"], seconds[mistake, "full"]
        print(f"| {mistake} | {summary(quick)} | {summary(full)} | {statistics.median(full) / statistics.median(quick):.0f}x |")


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


if __name__ == "__main__":
    main()
