"""The `trl-variants` command (`USAGE` below). Mistakes in the input print one line starting with
`trl-variants: error:` and exit with code 2; a run stopped by something the user can change (dynamic sampling out
of rounds, the Hub out of reach) prints one such line and exits with 1. The demo's options are read here, before
torch loads, so that its mistakes answer at once."""

import argparse
import difflib
import sys

from .common import VARIANT_COMMANDS, CliRunError, CliUsageError, check_output_dir, one_line

USAGE = """usage: trl-variants {demo,dapo,dr-grpo,grpo} [options]

commands:
  demo      offline CPU demo: trains a tiny policy with DAPO and shows its held-out accuracy before and after
  dapo      train with DAPOTrainer (DAPOConfig flags, TRL's ModelConfig and dataset flags)
  dr-grpo   train with DrGRPOTrainer (DrGRPOConfig flags)
  grpo      train with TRL's GRPOTrainer, the baseline, through the same launcher

`trl-variants COMMAND --help` lists a command's options. Training commands accept `--config recipe.yaml`,
`--reward_funcs NAME ...`, PEFT flags (`--use_peft --lora_r 16`) and `--accelerate_config zero2|zero3|fsdp2|PATH`
with any `accelerate launch` flag for multi-GPU and multi-node runs."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, options = argv[0], argv[1:]
    try:
        if command == "demo":
            return demo_command(options)
        if command not in VARIANT_COMMANDS:
            close = difflib.get_close_matches(command, ("demo", *VARIANT_COMMANDS), n=2, cutoff=0.6)
            guess = f" (did you mean {' or '.join(close)}?)" if close else ""
            commands = ", ".join(("demo", *VARIANT_COMMANDS))
            raise CliUsageError(f"unknown command {command!r}{guess}; choose one of {commands}.")
        return training_command(command, options)
    except (CliUsageError, CliRunError) as error:
        print(f"trl-variants: error: {one_line(error)}", file=sys.stderr)
        return 1 if isinstance(error, CliRunError) else 2
    except KeyboardInterrupt:  # the demo has removed its staging folder; a training run keeps its checkpoints
        print("trl-variants: interrupted", file=sys.stderr)
        return 130


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise CliUsageError(f"{self.prog}: {message}")


def training_command(command: str, options: list[str]) -> int:
    """Parses a training command, then relaunches it under accelerate or trains. Imports follow the path taken:
    TRL's parser and the config classes (torch and transformers) to parse, so that `trl-variants --help` waits for
    none of them; the datasets, rewards and Hub code of a run only once the command line is known to be right, so
    that `--help` and a mistyped flag answer as soon as TRL's own parser would."""
    from .args import VARIANTS, parse_command
    from .launch import accelerate_launch_options, inside_launched_process, relaunch

    variant = VARIANTS[command]
    parsed = parse_command(variant, options, accelerate_launch_options())
    check_output_dir(parsed.training_args.output_dir)
    if parsed.launch_args and not inside_launched_process():
        return relaunch(command, parsed.launch_args, parsed.training_script_args)
    from .train import run_training

    run_training(variant, parsed)
    return 0


def demo_command(argv: list[str]) -> int:
    parser = _Parser(prog="trl-variants demo", description="Offline CPU demo: train the embedded toy policy and "
                     "compare its held-out accuracy before and after.")  # fmt: skip
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the toy task and of training (default 0)")
    parser.add_argument("--output_dir", default="demo-output", help="output folder (default demo-output/)")
    parser.add_argument("--variant", default="dapo", choices=VARIANT_COMMANDS, help="trainer to use (default dapo)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        raise CliUsageError(f"--steps {args.steps} is not allowed; expected an integer >= 1.")
    check_output_dir(args.output_dir)
    from .demo import run_demo

    run_demo(args.steps, args.seed, args.output_dir, args.variant)
    return 0
