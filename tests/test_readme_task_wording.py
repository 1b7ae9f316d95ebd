"""The README describes the toy task and the demo's task as the code builds them."""

import inspect
import re
from pathlib import Path

from trl_variants.cli.demo import DEMO_TASK
from trl_variants.real.run import DEFAULT_TASK_CONFIG
from trl_variants.toy import make_toy_task

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_readme_states_the_operand_ranges_the_code_uses():
    default_max = inspect.signature(make_toy_task).parameters["max_operand"].default
    assert f"`a, b <= {default_max}`" in README
    assert f"operands up to {DEMO_TASK['max_operand']}" in README.split("## The demo")[1]


def test_readme_names_no_digit_count_the_code_does_not_use():
    toy_part, real_part = README.split("## A real model on a real task")
    # Operands up to 19 are neither one-digit nor two-digit numbers throughout; only the default task is one-digit.
    digit_words = re.findall(r"\b(\w+)-digit\b", toy_part)
    assert digit_words == ["one"] and inspect.signature(make_toy_task).parameters["max_operand"].default == 9
    # The real-model example's reasoning-gym task: configured as one digit, which reasoning-gym draws from 0 to 10,
    # so the README gives the range rather than a digit count.
    assert re.findall(r"\b(\w+)-digit\b", real_part) == []
    assert "two terms from 0 to 10" in real_part
    assert DEFAULT_TASK_CONFIG["min_digits"] == DEFAULT_TASK_CONFIG["max_digits"] == 1
