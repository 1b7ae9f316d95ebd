"""What every part of the command line shares. It imports nothing heavy, so `trl-variants --help` and
`trl-variants demo --help` answer without loading torch or TRL."""

# The training commands, in the order the usage text lists them; `args.VARIANTS` maps each to its classes.
VARIANT_COMMANDS = ("dapo", "dr-grpo", "grpo")

# `--accelerate_config` is resolved by TRL's helper into `--config_file`; it is not an `accelerate launch` flag.
ACCELERATE_CONFIG_FLAG = "--accelerate_config"

# `trl-variants demo`'s defaults, shared by its option parser and by `run_demo`.
DEMO_DEFAULT_STEPS = 300
DEMO_DEFAULT_OUTPUT_DIR = "demo-output"

# `trl-variants real-demo`'s defaults, shared by its option parser and by the command line it prints to resume a
# run (which leaves defaults out).
REAL_DEMO_DEFAULTS = {
    "--variant": "dapo",
    "--steps": 20,
    "--seed": 0,
    "--task": "basic_arithmetic",
    "--held_out_prompts": 40,
    "--samples_per_prompt": 4,
    "--output_dir": "real-demo-output",
}
# Written last into a finished `trl-variants real-demo` output folder.
REAL_DEMO_SUMMARY_FILE = "real_demo_summary.json"
# How long `trl-variants real-demo` takes at its defaults, on the machine that measured it; `--help`, the usage
# text and docs/cli.md say it in these words (docs/cli.md has the measurement and the effect of load).
REAL_DEMO_DURATION = "about 16 minutes on an idle 2-core AMD EPYC with AVX-512"


class CliUsageError(Exception):
    """Bad input from the command line or a recipe: reported as one line, exit code 2, no traceback."""


class CliRunError(Exception):
    """A run stopped for a reason the user can act on (the message says how): one line, exit code 1."""


def check_minimums(args, minimums: dict[str, int]) -> None:
    """Raises `CliUsageError` for the first of the parsed integer options `minimums` names that is below its minimum."""
    for name, low in minimums.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise CliUsageError(f"--{name} {value} is not allowed; expected an integer >= {low}.")
