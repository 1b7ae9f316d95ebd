"""Checks shared by the variant configs. Every error names the field, the value and what is allowed."""


def require(condition: bool, field_name: str, value, allowed: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}={value!r} is not allowed; expected {allowed}.")


def check_common_fields(config) -> None:
    """Checks that hold for every GRPO-family config, before TRL's own `__post_init__` runs."""
    require(config.epsilon >= 0, "epsilon", config.epsilon, ">= 0")
    if config.epsilon_high is not None:
        require(config.epsilon_high >= 0, "epsilon_high", config.epsilon_high, ">= 0")
        require(
            config.epsilon_high >= config.epsilon,
            "epsilon_high",
            config.epsilon_high,
            f"a value >= epsilon ({config.epsilon}); clip-higher widens the upper range, never narrows it",
        )
    require(config.beta >= 0, "beta", config.beta, ">= 0")
    require(
        isinstance(config.num_generations, int) and config.num_generations >= 2,
        "num_generations",
        config.num_generations,
        "an integer >= 2 (group-relative advantages need at least two completions per prompt)",
    )
    require(
        isinstance(config.max_completion_length, int) and config.max_completion_length >= 1,
        "max_completion_length",
        config.max_completion_length,
        "an integer >= 1",
    )
