"""How long the command line takes to answer before any training: `trl-variants dapo --help` and a mistyped flag's
error against TRL's own `trl grpo --help`.

Each command runs as a fresh process started as its console script starts it (`from X import main;
sys.exit(main())`) from the repository root, so the repository's `trl_variants` is the one timed. The three commands
run interleaved, one of each per repeat, their order rotated every repeat, so that load from other work on the
machine falls on every command alike; the report gives each command's median wall time (and CPU time: user and
system of the child), the ratio of the medians against `trl grpo --help`, and the median of the per-repeat ratios.
Each command's outcome is checked (help: exit 0 and its usage line; the mistake: exit 2 and the one-line error), so
a broken command cannot pass for a fast one.

    python -m benchmarks.cli_startup.startup              # 9 repeats of the three commands
    python -m benchmarks.cli_startup.startup --smoke      # one repeat, output in a temporary folder
"""

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.shared.output import (
    command_line, load_average, machine_description, machine_markdown, markdown_table, write_json,
)  # fmt: skip

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The ratio against `trl grpo --help` the command line aims at.
TARGET_RATIO = 1.2


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # the console script's module, whose `main` it calls
    program: str  # sys.argv[0], as the console script sets it
    argv: tuple[str, ...]
    returncode: int
    expected: str  # text the output must contain
    stream: str  # "stdout" or "stderr"


BASELINE = "trl grpo --help"
COMMANDS = (
    Command(BASELINE, "trl.cli", "trl", ("grpo", "--help"), 0, "usage: trl grpo", "stdout"),
    Command("trl-variants dapo --help", "trl_variants.cli", "trl-variants", ("dapo", "--help"), 0,
            "usage: trl-variants dapo", "stdout"),
    # `--learning_rat` would not do: argparse takes an unambiguous prefix of a flag as the flag.
    Command("trl-variants dapo --learning_rte 1e-5", "trl_variants.cli", "trl-variants",
            ("dapo", "--learning_rte", "1e-5"), 2, "trl-variants: error: unknown argument --learning_rte", "stderr"),
)  # fmt: skip


def run_once(command: Command) -> tuple[float, float]:
    """Runs `command` in a fresh process; returns its wall and CPU seconds, or raises naming what went wrong."""
    script = f"import sys; from {command.module} import main; sys.argv[0] = {command.program!r}; sys.exit(main())"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", script, *command.argv], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = getattr(result, command.stream)
    if result.returncode != command.returncode or command.expected not in output:
        raise RuntimeError(
            f"{command.name!r} exited with {result.returncode} (expected {command.returncode}) and its "
            f"{command.stream} lacks {command.expected!r}:\n{result.stdout[-1500:]}\n{result.stderr[-1500:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(repeats: int, log=print) -> dict[str, dict[str, list[float]]]:
    """Every command's wall and CPU seconds per repeat, the commands interleaved in an order rotated every repeat."""
    times = {command.name: {"wall_s": [], "cpu_s": []} for command in COMMANDS}
    for repeat in range(repeats):
        shift = repeat % len(COMMANDS)
        for command in COMMANDS[shift:] + COMMANDS[:shift]:
            wall, cpu = run_once(command)
            times[command.name]["wall_s"].append(wall)
            times[command.name]["cpu_s"].append(cpu)
            log(f"repeat {repeat + 1}/{repeats}: {command.name}: {wall:.2f} s wall, {cpu:.2f} s CPU "
                f"(load {load_average()})")
    return times


def summarise(times: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per command: median, min and max wall seconds, median CPU seconds and, against the baseline, the ratio of the
    wall medians, the median of the per-repeat wall ratios (each repeat ran every command under about the same
    load) and the ratio of the CPU medians (less sensitive to other work on the machine than wall time)."""
    baseline = times[BASELINE]["wall_s"]
    summary = {}
    for name, runs in times.items():
        wall = runs["wall_s"]
        summary[name] = {
            "median_wall_s": statistics.median(wall),
            "min_wall_s": min(wall),
            "max_wall_s": max(wall),
            "median_cpu_s": statistics.median(runs["cpu_s"]),
            "ratio_of_medians": statistics.median(wall) / statistics.median(baseline),
            "median_paired_ratio": statistics.median(mine / base for mine, base in zip(wall, baseline, strict=True)),
            "cpu_ratio_of_medians": statistics.median(runs["cpu_s"]) / statistics.median(times[BASELINE]["cpu_s"]),
        }
    return summary


def report_markdown(summary: dict, repeats: int, command: str, machine: dict[str, str]) -> str:
    rows = [
        [f"`{name}`", f"{values['median_wall_s']:.2f}", f"{values['min_wall_s']:.2f}-{values['max_wall_s']:.2f}",
         f"{values['ratio_of_medians']:.2f}x", f"{values['median_paired_ratio']:.2f}x", f"{values['median_cpu_s']:.2f}",
         f"{values['cpu_ratio_of_medians']:.2f}x"]
        for name, values in summary.items()
    ]  # fmt: skip
    worst = max(values["median_paired_ratio"] for name, values in summary.items() if name != BASELINE)
    worst_cpu = max(values["cpu_ratio_of_medians"] for name, values in summary.items() if name != BASELINE)
    verdict = "within" if worst <= TARGET_RATIO else "above"
    return "\n".join([
        "# Command-line start-up",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_markdown(machine)}.",
        "",
        f"{repeats} repeats, the three commands interleaved (order rotated every repeat), each a fresh process. "
        f"Wall and CPU seconds (user and system of the process); ratios against `{BASELINE}`. The target is judged "
        "on the median per-repeat wall ratio: each repeat ran the three commands back to back, under about the same "
        "load, whereas the ratio of the wall medians compares repeats run under different loads.",
        "",
        markdown_table(["command", "median wall s", "wall range s", "wall ratio of medians", "median per-repeat wall "
                        "ratio", "median CPU s", "CPU ratio of medians"], rows),  # fmt: skip
        "",
        f"The slowest `trl-variants` command's median per-repeat wall ratio, {worst:.2f}x, is {verdict} the target "
        f"of {TARGET_RATIO}x; the highest CPU ratio of medians is {worst_cpu:.2f}x.",
        "",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="repeats of the three commands (default 9)")
    parser.add_argument("--smoke", action="store_true", help="one repeat, written to a temporary folder")
    parser.add_argument("--output_dir", type=Path, default=None, help=f"default {RESULTS_DIR.relative_to(REPO)}/")
    cli = parser.parse_args(argv)
    if cli.repeats < 1:
        parser.error(f"--repeats {cli.repeats} is not allowed; expected an integer >= 1.")
    repeats = 1 if cli.smoke else cli.repeats
    output_dir = cli.output_dir or (Path(tempfile.mkdtemp(prefix="cli_startup_")) if cli.smoke else RESULTS_DIR)
    output_dir.mkdir(parents=True, exist_ok=True)
    load_at_start = load_average()
    times = measure(repeats)
    summary = summarise(times)
    machine = machine_description(num_threads=1, load_at_start=load_at_start)
    machine.pop("torch threads")  # each command runs in its own process; no torch thread count applies
    command = command_line("benchmarks.cli_startup.startup", argv)
    write_json({"command": command, "machine": machine, "repeats": repeats, "times": times, "summary": summary},
               str(output_dir / "cli_startup.json"))  # fmt: skip
    report = report_markdown(summary, repeats, command, machine)
    (output_dir / "cli_startup.md").write_text(report)
    print(report)
    print(f"Wrote {output_dir / 'cli_startup.md'} and cli_startup.json.")


if __name__ == "__main__":
    main()
