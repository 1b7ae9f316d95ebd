"""The reward names the command line accepts, and the messages for a name it does not, without importing the
reward functions (which load TRL and torch): `trl-variants` checks `--reward_funcs` before anything heavy loads.
`registry` maps each name to its function."""

import difflib

REGISTERED_NAMES = ("dapo_accuracy", "accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")

OVERLONG_NAMES = frozenset({"soft_overlong_punishment", "get_soft_overlong_punishment", "overlong_punishment"})


def accepted_names_text() -> str:
    return ", ".join(REGISTERED_NAMES) + " or a dotted import path such as my_package.rewards.my_reward"


def reward_name_problem(name: str) -> str | None:
    """Why `name` names no reward, or `None` for a registered name or a dotted import path (whose import is tried
    when the reward is resolved)."""
    if name in REGISTERED_NAMES or (name not in OVERLONG_NAMES and "." in name):
        return None
    if name in OVERLONG_NAMES:
        return (
            f"reward_funcs: {name!r} is not a reward name; DAPO's soft overlong punishment is added by "
            "`trl-variants dapo --overlong_buffer_length N` (DAPOConfig), which sizes it from max_completion_length. "
            f"Accepted reward names: {accepted_names_text()}."
        )
    close = difflib.get_close_matches(name, REGISTERED_NAMES, n=1)
    suggestion = f" (did you mean {close[0]}?)" if close else ""
    return f"reward_funcs: unknown reward {name!r}{suggestion}; accepted: {accepted_names_text()}."
