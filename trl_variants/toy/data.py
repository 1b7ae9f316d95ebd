"""The toy task's data: short addition problems whose answers a rule can check exactly."""

import random

from datasets import Dataset


def addition_problems(max_operand: int) -> list[dict[str, str]]:
    """Every problem `a+b=` with `0 <= a, b <= max_operand`, in a fixed order."""
    if max_operand < 1:
        raise ValueError(f"addition_problems: max_operand must be >= 1, got {max_operand}.")
    return [
        {"prompt": f"{a}+{b}=", "answer": str(a + b)}
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    ]


def split_problems(
    max_operand: int, held_out_fraction: float, seed: int
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Shuffles all problems with `seed` and splits off a held-out share that RL never trains on."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"split_problems: held_out_fraction must be in (0, 1), got {held_out_fraction}.")
    problems = addition_problems(max_operand)
    random.Random(seed).shuffle(problems)
    num_held_out = max(1, round(len(problems) * held_out_fraction))
    return problems[num_held_out:], problems[:num_held_out]


def to_dataset(problems: list[dict[str, str]]) -> Dataset:
    return Dataset.from_list(problems)
