"""`trl-variants demo`'s options. Parsed before the demo module (torch, TRL, the toy task) is imported, so that
`trl-variants demo --help` and a mistyped option answer at once."""

import argparse

from .common import DEMO_DEFAULT_OUTPUT_DIR, DEMO_DEFAULT_STEPS, VARIANT_COMMANDS, CliUsageError, check_minimums
from .output import check_output_dir


class _DemoArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        raise CliUsageError(f"trl-variants demo: {message}")


def demo_main(argv: list[str]) -> int:
    parser = _DemoArgumentParser(
        prog="trl-variants demo",
        description="Offline CPU demo: train the embedded toy policy and compare held-out accuracy before and after.",
    )
    parser.add_argument("--steps", type=int, default=DEMO_DEFAULT_STEPS, help=f"training steps (default {DEMO_DEFAULT_STEPS})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the toy task and of training (default 0)")
    parser.add_argument(
        "--output_dir", default=DEMO_DEFAULT_OUTPUT_DIR, help=f"output folder (default {DEMO_DEFAULT_OUTPUT_DIR}/)"
    )
    parser.add_argument("--variant", default="dapo", choices=VARIANT_COMMANDS, help="trainer to use (default dapo)")
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    # Checked before the demo module (torch, TRL) loads, which takes seconds; `run_demo` checks them again.
    check_minimums(args, {"steps": 1})
    check_output_dir(args.output_dir)
    from .demo import run_demo

    run_demo(args.steps, args.seed, args.output_dir, args.variant, show_progress=not args.no_progress)
    return 0
