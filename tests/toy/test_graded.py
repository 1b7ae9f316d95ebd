"""The graded benchmark task's pure pieces: problems by level, the stratified split, completion styles, the reward."""

import random

import pytest

from trl_variants.toy.graded import (
    ANSWER_MARKER,
    GRADED_CHARACTERS,
    LEVELS,
    MAX_COMPLETION_LENGTH,
    direct_completion,
    final_answer,
    graded_accuracy_reward,
    level_problems,
    rechecked_completion,
    split_graded_problems,
    warm_start_examples,
    worked_completion,
)
from trl_variants.toy.tokenizer import build_char_tokenizer


def operands(prompt: str) -> list[int]:
    return [int(term) for term in prompt.rstrip("=").split("+")]


@pytest.mark.parametrize("level", list(LEVELS))
def test_level_problems_follow_the_level_and_are_right(level):
    problems = level_problems(level, 50, random.Random(0))
    assert len({p["prompt"] for p in problems}) == len(problems) == 50
    for problem in problems:
        terms = operands(problem["prompt"])
        assert [len(str(term)) for term in terms] == list(LEVELS[level].operand_digits)
        assert problem["answer"] == str(sum(terms)) and problem["level"] == level


def test_a_small_level_gives_every_problem_once():
    assert len(level_problems(1, 10_000, random.Random(0))) == 100


def test_split_is_disjoint_stratified_and_deterministic():
    train, held_out = split_graded_problems(seed=3)
    assert len(held_out) >= 400
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held_out}
    counts = {level: sum(p["level"] == level for p in held_out) for level in LEVELS}
    assert all(count > 0 for count in counts.values()), counts
    # The small easiest level gives half its problems; every other level the same number.
    assert counts[1] == 50 and len(set(list(counts.values())[1:])) == 1
    assert split_graded_problems(seed=3) == (train, held_out)
    assert split_graded_problems(seed=4) != (train, held_out)


@pytest.mark.parametrize(
    ("prompt", "worked", "rechecked", "direct"),
    [
        ("1+2+3=", "3 6#6", "3 6 3 6#6", "#6"),
        ("45+9=", "54#54", "54 54#54", "#54"),
        ("99+99+99=", "198 297#297", "198 297 198 297#297", "#297"),
    ],
)
def test_completion_styles(prompt, worked, rechecked, direct):
    assert (worked_completion(prompt), rechecked_completion(prompt), direct_completion(prompt)) == (
        worked,
        rechecked,
        direct,
    )


def test_lengths_fit_except_rechecked_working_on_the_hardest_level():
    tokenizer = build_char_tokenizer(GRADED_CHARACTERS)
    hardest = "99+99+99="
    for style in (direct_completion, worked_completion):
        assert len(tokenizer(style(hardest))["input_ids"]) + 1 <= MAX_COMPLETION_LENGTH
    # Truncation must be reachable by a policy that grows its working.
    assert len(tokenizer(rechecked_completion(hardest) + " 198 297")["input_ids"]) > MAX_COMPLETION_LENGTH
    assert tokenizer.unk_token_id not in tokenizer(rechecked_completion(hardest))["input_ids"]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [("3 6#6", "6"), ("#6", "6"), ("#5 #6", "6"), ("3 6", None), ("", None), ("#", ""), ("12#6 ", "6")],
)
def test_final_answer_is_after_the_last_marker(completion, expected):
    assert final_answer(completion) == expected


def test_reward_is_plus_or_minus_one():
    completions = ["3 6#6", "#6", "3 6", "#7", "3 6 3 6#6"]
    assert graded_accuracy_reward(completions, ["6"] * 5) == [1.0, 1.0, -1.0, -1.0, 1.0]
    with pytest.raises(ValueError, match="graded_accuracy_reward: got 2 completions but 1 answers"):
        graded_accuracy_reward(["#1", "#2"], ["1"])


def test_warm_start_mixes_the_styles():
    train, _ = split_graded_problems(seed=0)
    examples = warm_start_examples(train, seed=0)
    markers = [example["answer"].index(ANSWER_MARKER) for example in examples]
    direct = sum(position == 0 for position in markers) / len(examples)
    assert 0.3 < direct < 0.5  # 40% direct, the rest worked or rechecked
    assert all(final_answer(e["answer"]) == str(sum(operands(e["prompt"]))) for e in examples)
