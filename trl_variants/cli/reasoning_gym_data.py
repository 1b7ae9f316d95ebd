"""`--reasoning_gym_task`: a reasoning-gym task as the training dataset of `trl-variants dapo|dr-grpo|grpo`, with the
task's verifier as a reward function (trl_variants/rewards/reasoning_gym_source.py)."""

import json

from .common import CliUsageError


def parse_task_config(value) -> dict:
    """`--reasoning_gym_config` as a dict: JSON text from the command line, or a mapping from a recipe."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise CliUsageError(
            f"--reasoning_gym_config={value!r} is not valid JSON ({error.msg}); pass an object such as "
            "'{\"min_terms\": 2, \"max_terms\": 2}'."
        ) from None
    if not isinstance(parsed, dict):
        raise CliUsageError(
            f"--reasoning_gym_config={value!r} is a JSON {type(parsed).__name__}; pass an object of the task's "
            "config keys, such as '{\"min_terms\": 2}'."
        )
    return parsed


def reasoning_gym_training_source(script_args, training_args, dataset_args):
    """The `ReasoningGymSource` named by the script arguments; `CliUsageError` for any problem with them."""
    from ..rewards.reasoning_gym_source import ReasoningGymError, reasoning_gym_source

    if script_args.dataset_name or dataset_args.datasets:
        other = f"--dataset_name={script_args.dataset_name!r}" if script_args.dataset_name else "a `datasets:` list"
        raise CliUsageError(
            f"--reasoning_gym_task={script_args.reasoning_gym_task!r} and {other} both name the training data; "
            "pass one of them."
        )
    if training_args.eval_strategy != "no":
        raise CliUsageError(
            f"eval_strategy={training_args.eval_strategy!r} with --reasoning_gym_task: the command line trains on a "
            "reasoning-gym task without an evaluation split; measure held-out accuracy with "
            "trl_variants.rewards.pass_rate.sampled_pass_rate, or set --eval_strategy no."
        )
    try:
        return reasoning_gym_source(
            script_args.reasoning_gym_task,
            parse_task_config(script_args.reasoning_gym_config),
            size=script_args.reasoning_gym_size,
            seed=script_args.reasoning_gym_seed,
        )
    except ReasoningGymError as error:
        raise CliUsageError(str(error)) from None
