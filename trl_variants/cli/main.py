"""The `trl-variants` command.

    trl-variants demo                                    # offline CPU demo: the toy policy learns with DAPO
    trl-variants real-demo                               # SmolLM2-135M-Instruct learns a reasoning-gym task
    trl-variants dapo --config examples/recipes/dapo_qwen2.5_7b.yaml
    trl-variants dr-grpo --model_name_or_path Qwen/Qwen2.5-Math-1.5B --dataset_name ... --reward_funcs accuracy_reward
    trl-variants grpo ...                                # TRL's GRPO through the same launcher, as a baseline
    trl-variants dapo --config recipe.yaml --accelerate_config zero3 --num_processes 8

Mistakes in the input (an unknown reward, a missing dataset column, a recipe key that is no field, an unwritable
output folder) print one line starting with `trl-variants: error:` and exit with code 2; a run stopped by something
the user can change (dynamic sampling out of rounds, the Hub out of reach) prints one such line and exits with 1.
"""

import difflib
import sys

from .common import REAL_DEMO_DURATION, VARIANT_COMMANDS, CliRunError, CliUsageError

USAGE = f"""usage: trl-variants {{demo,real-demo,dapo,dr-grpo,grpo}} [options]

commands:
  demo      offline CPU demo: trains a tiny policy with DAPO and shows its held-out accuracy before and after
  real-demo offline CPU example: trains SmolLM2-135M-Instruct on a reasoning-gym task
            ({REAL_DEMO_DURATION}; Ctrl-C keeps its steps, the same command resumes)
  dapo      train with DAPOTrainer (DAPOConfig flags, TRL's ModelConfig and dataset flags)
  dr-grpo   train with DrGRPOTrainer (DrGRPOConfig flags)
  grpo      train with TRL's GRPOTrainer, the baseline, through the same launcher

`trl-variants COMMAND --help` lists a command's options. Training commands accept `--config recipe.yaml`,
`--reward_funcs NAME ...`, PEFT flags (`--use_peft --lora_r 16`) and `--accelerate_config zero2|zero3|fsdp2|PATH`
with any `accelerate launch` flag for multi-GPU and multi-node runs."""

USAGE_ERROR_EXIT_CODE = 2
RUN_ERROR_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0

    command, options = argv[0], argv[1:]
    try:
        if command == "demo":
            from .demo_command import demo_main

            return demo_main(options)
        if command == "real-demo":
            from .real_demo_command import real_demo_main

            return real_demo_main(options)
        if command not in VARIANT_COMMANDS:
            raise CliUsageError(unknown_command_problem(command))
        return run_variant_command(command, options)
    except (CliUsageError, CliRunError) as error:
        print(f"trl-variants: error: {' '.join(str(error).split())}", file=sys.stderr)
        return RUN_ERROR_EXIT_CODE if isinstance(error, CliRunError) else USAGE_ERROR_EXIT_CODE
    except KeyboardInterrupt:
        # The demo has already removed its staging folder; a training run keeps its checkpoints.
        print("trl-variants: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE


def unknown_command_problem(command: str) -> str:
    commands = ("demo", "real-demo", *VARIANT_COMMANDS)
    close = difflib.get_close_matches(command, commands, n=2, cutoff=0.6)
    guess = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown command {command!r}{guess}; choose one of {', '.join(commands)}."


def run_variant_command(command: str, options: list[str]) -> int:
    # Imported here: TRL and torch take seconds to load, which `trl-variants --help` should not wait for.
    from .args import VARIANTS, parse_command
    from .launch import accelerate_launch_options, inside_launched_process, relaunch
    from .output import check_output_dir
    from .train import run_training

    variant = VARIANTS[command]
    parsed = parse_command(variant, options, accelerate_launch_options())
    check_output_dir(parsed.training_args.output_dir)
    if parsed.launch_args and not inside_launched_process():
        return relaunch(variant.command, parsed.launch_args, parsed.training_script_args)
    run_training(variant, parsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
