"""Seconds from starting `trl-variants` to its error line, for common command-line mistakes: a negative learning
rate, an unknown reward name, a misspelt field, a missing local data file, a local data file without the prompt
column, a missing local model folder, an out-of-range demo argument and a mistyped command.

Two arms run the same command lines in fresh processes, alternating (order reversed every repeat), so that machine
drift and other work hit both alike:
- `quick`: the command as shipped (`python -m trl_variants.cli ...`), whose mistakes `quick_checks` and the demo's
  option parser report before torch, transformers or TRL load;
- `full`: the path the command took before those checks existed, and still takes for valid input: for a training
  command, TRL's parser over the four dataclasses (`args.parse_command`), the reward names
  (`registry.resolve_reward`) and the run's own checks of the model and dataset (`train.run_training`, which loads
  the dataset with `datasets`); for the demo, `run_demo`. A mistyped command has no such path: it is timed in the
  quick arm alone.
Both arms must print the same error line; the script fails otherwise. It prints a Markdown table with the machine
and the load average before and after, which docs/benchmarks.md copies.

    python -m benchmarks.cli_errors.cli_errors              # 5 repeats
    python -m benchmarks.cli_errors.cli_errors --repeats 1  # a quick look
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trl_variants.machine import cpu_model, usable_cpus

REPO_ROOT = Path(__file__).resolve().parents[2]

# Each mistake: the `trl-variants` arguments, given the scratch folder that `write_inputs` fills.
MISTAKES = {
    "negative learning rate (`--learning_rate -1e-6`)": lambda tmp: training(tmp, "--learning_rate", "-1e-6"),
    "unknown reward name (`--reward_funcs nope`)": lambda tmp: training(tmp, "--reward_funcs", "nope"),
    "misspelt field (`--epsilon_hihg 0.28`)": lambda tmp: training(tmp, "--epsilon_hihg", "0.28"),
    "missing local data file": lambda tmp: training(tmp, "--dataset_name", f"{tmp}/no-such-data.jsonl"),
    "JSON Lines file without the prompt column": lambda tmp: training(tmp, "--dataset_name", f"{tmp}/qa.jsonl"),
    "missing local model folder": lambda tmp: training(tmp, "--model_name_or_path", f"{tmp}/no-such-model"),
    "`demo --steps 0`": lambda tmp: ["demo", "--steps", "0", "--output_dir", f"{tmp}/demo-output"],
    "mistyped command (`dapoo`)": lambda tmp: ["dapoo", "--model_name_or_path", f"{tmp}/model"],
}
# The path each command took before the quick checks, which it still takes for valid input.
FULL_RUN = """
import sys
from trl_variants.cli.common import CliUsageError
from trl_variants.rewards.registry import RewardLookupError
try:
    if sys.argv[1] == "demo":
        from trl_variants.cli.demo import run_demo
        run_demo(steps=int(sys.argv[3]), output_dir=sys.argv[5], show_progress=False)
    else:
        from trl_variants.cli.args import VARIANTS, parse_command
        from trl_variants.cli.launch import accelerate_launch_options
        from trl_variants.cli.train import run_training
        from trl_variants.rewards.registry import resolve_reward
        parsed = parse_command(VARIANTS["dapo"], sys.argv[2:], accelerate_launch_options())
        for name in parsed.script_args.reward_funcs:
            resolve_reward(name)
        run_training(VARIANTS["dapo"], parsed)
except (CliUsageError, RewardLookupError) as error:
    print(f"trl-variants: error: {' '.join(str(error).split())}", file=sys.stderr)
    sys.exit(2)
"""


def training(tmp: str, *flags: str) -> list[str]:
    """`trl-variants dapo` with a valid local model folder and data file, then `flags` (argparse keeps the last)."""
    return ["dapo", "--model_name_or_path", f"{tmp}/model", "--dataset_name", f"{tmp}/prompts.jsonl",
            "--reward_funcs", "dapo_accuracy", "--output_dir", f"{tmp}/out", "--use_cpu", "true", "--bf16", "false",
            *flags]  # fmt: skip


def write_inputs(tmp: str) -> None:
    """A folder the model check accepts (it reads file names only) and two small data files."""
    os.makedirs(f"{tmp}/model")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        Path(f"{tmp}/model/{name}").touch()
    Path(f"{tmp}/prompts.jsonl").write_text(json.dumps({"prompt": "1+1=", "solution": "2"}) + "\n")
    Path(f"{tmp}/qa.jsonl").write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")


def command_line(arm: str, argv: list[str]) -> list[str] | None:
    if arm == "quick":
        return [sys.executable, "-m", "trl_variants.cli", *argv]
    if argv[0] not in ("dapo", "demo"):
        return None
    return [sys.executable, "-c", FULL_RUN, *argv]


def seconds_to_error(command: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT)
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
    with tempfile.TemporaryDirectory() as tmp:
        write_inputs(tmp)
        for repeat in range(args.repeats):
            arms = ("quick", "full") if repeat % 2 == 0 else ("full", "quick")
            for mistake, argv_of in MISTAKES.items():
                errors = {}
                for arm in arms:
                    command = command_line(arm, argv_of(tmp))
                    if command is not None:
                        elapsed, errors[arm] = seconds_to_error(command)
                        seconds[mistake, arm].append(elapsed)
                if len(set(errors.values())) != 1:
                    raise SystemExit(f"{mistake}: the arms disagree:\n" + "\n".join(errors.values()))
    load_after = os.getloadavg()
    print(f"Machine: {cpu_model()}, {usable_cpus()} CPUs, Python {sys.version.split()[0]}. Load average (1, 5, 15 "
          f"min) {', '.join(f'{x:.1f}' for x in load_before)} before, {', '.join(f'{x:.1f}' for x in load_after)} "
          f"after. {args.repeats} repeats per arm; median [min, max] seconds from start to the error line.\n")  # fmt: skip
    print("| mistake | quick checks | full path | full / quick |")
    print("|---|---|---|---|")
    for mistake in MISTAKES:
        quick, full = seconds[mistake, "quick"], seconds[mistake, "full"]
        ratio = f"{statistics.median(full) / statistics.median(quick):.0f}x" if full else "-"
        print(f"| {mistake} | {summary(quick)} | {summary(full) if full else '- (none)'} | {ratio} |")


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


if __name__ == "__main__":
    main()
