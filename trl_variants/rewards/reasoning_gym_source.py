"""reasoning-gym as a reward source: any of its procedural tasks as a TRL conversational dataset plus a reward
function scored by the task's own verifier (`score_answer`, 0.0 to 1.0); docs/cli.md, "reasoning-gym tasks".

reasoning-gym is an optional extra (`pip install ".[reasoning-gym]"`), imported when a source is built. The
instruction to answer on an `Answer:` line goes in the user message, after the question: small instruct models follow
it far more often there than in a system message. Each row keeps its entry's index in the column
`reasoning_gym_index`; the reward looks the entry up by it, so filtering or shuffling the dataset keeps rewards right.
"""

import dataclasses
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .accuracy import completion_text

ANSWER_INSTRUCTION = "Give the final answer on the last line as 'Answer: <answer>'."
INDEX_COLUMN = "reasoning_gym_index"
# The seed of `worked_example`'s entry, apart from the seeds training and evaluation sets are usually drawn with.
EXAMPLE_SEED = 2**31 - 1
INSTALL_HINT = 'pip install ".[reasoning-gym]" (or pip install reasoning-gym)'

_ANSWER_LINE = re.compile(r"answer\s*:\s*(?P<answer>[^\n]*)", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>\s?(?P<answer>.*?)\s?</answer>", re.DOTALL)


class ReasoningGymError(ValueError):
    """An unknown reasoning-gym task name, config key or value, or a missing reasoning-gym install."""


def extract_answer(text: str) -> str | None:
    """The text after the last `Answer:` (case-insensitive) on its line, with whitespace, surrounding `*`, backticks
    and `$`, and one final period stripped; else the last `<answer>...</answer>`; else the last non-empty line;
    `None` for a blank completion."""
    lines = list(_ANSWER_LINE.finditer(text))
    if lines:
        answer = lines[-1]["answer"].strip().strip("*`$ ").strip()
        return answer[:-1].rstrip() if answer.endswith(".") else answer
    tags = list(_ANSWER_TAG.finditer(text))
    if tags:
        return tags[-1]["answer"].strip()
    last_lines = [line.strip() for line in text.splitlines() if line.strip()]
    return last_lines[-1] if last_lines else None


class ReasoningGymReward:
    """TRL reward function: the task's `score_answer` on the answer extracted from each completion.

    Reads the dataset column `reasoning_gym_index` (the entry each prompt came from). Its `__name__`,
    `reasoning_gym_<task>`, names its column in TRL's logs.
    """

    def __init__(self, procedural_dataset, entries: dict[int, dict], name: str):
        self.procedural_dataset = procedural_dataset
        self.entries = entries
        self.__name__ = f"reasoning_gym_{name}"

    def score(self, text: str, index: int) -> float:
        return float(self.procedural_dataset.score_answer(extract_answer(text), self.entries[index]))

    def __call__(self, completions: list, reasoning_gym_index: list[int], **kwargs) -> list[float]:
        if len(completions) != len(reasoning_gym_index):
            raise ValueError(
                f"{self.__name__}: got {len(completions)} completions but {len(reasoning_gym_index)} "
                f"{INDEX_COLUMN} values."
            )
        return [
            self.score(completion_text(completion), int(index))
            for completion, index in zip(completions, reasoning_gym_index, strict=True)
        ]


@dataclass
class ReasoningGymSource:
    """A reasoning-gym task ready for a TRL trainer.

    `dataset`: columns `prompt` (a conversation: any system message and worked example, then the question and the
    instruction as user message), `question`, `answer` (the gold answer as text) and `reasoning_gym_index`.
    `reward_func`: the `ReasoningGymReward` for it. `procedural_dataset`: the reasoning-gym dataset object.
    `excluded`: how many generated entries were dropped because their question was in `exclude_questions`.
    """

    name: str
    procedural_dataset: Any
    dataset: Any
    reward_func: ReasoningGymReward
    excluded: int = 0
    questions: list[str] = field(default_factory=list)


def _task_registry() -> dict:
    try:
        from reasoning_gym.factory import DATASETS  # importing the package registers every task
    except ImportError:
        raise ReasoningGymError(f"reasoning-gym is not installed; install it with `{INSTALL_HINT}`.") from None
    return DATASETS


def make_procedural_dataset(task: str, config: dict | None = None, size: int = 500, seed: int = 0):
    """`reasoning_gym.create_dataset(task, **config, size=size, seed=seed)`, with a `ReasoningGymError` naming the
    task, key or value and what is allowed instead of reasoning-gym's bare `ValueError`/`AssertionError`."""
    registry = _task_registry()
    if task not in registry:
        close = difflib.get_close_matches(task, list(registry), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ReasoningGymError(
            f"reasoning_gym_task={task!r} is not a reasoning-gym task.{hint} reasoning-gym has {len(registry)} "
            'tasks; list them with `python -c "import reasoning_gym.factory as f; print(sorted(f.DATASETS))"`.'
        )
    dataset_class, config_class = registry[task]
    config = dict(config or {})
    keys = [item.name for item in dataclasses.fields(config_class)]
    for reserved in ("size", "seed"):
        if reserved in config:
            raise ReasoningGymError(
                f"reasoning_gym_config: set {reserved!r} with the separate size/seed argument "
                f"(--reasoning_gym_{reserved}), not in the task's config."
            )
    unknown = sorted(set(config) - set(keys))
    if unknown:
        allowed = [key for key in keys if key not in ("size", "seed")]
        raise ReasoningGymError(
            f"reasoning_gym_config: {unknown} not a config key of reasoning-gym task {task!r}; its keys are {allowed}."
        )
    try:
        task_config = config_class(**config, size=size, seed=seed)
        if hasattr(task_config, "validate"):
            task_config.validate()
    except (AssertionError, ValueError, TypeError) as error:
        raise ReasoningGymError(
            f"reasoning_gym_config={config!r} is not valid for task {task!r}: {error or 'a value is out of range'}."
        ) from None
    return dataset_class(config=task_config)


def _is_procedural_dataset(value) -> bool:
    return all(hasattr(value, attribute) for attribute in ("score_answer", "__getitem__", "__len__"))


def reasoning_gym_source(
    task,
    config: dict | None = None,
    size: int = 500,
    seed: int = 0,
    instruction: str | None = ANSWER_INSTRUCTION,
    system_prompt: str | None = None,
    exclude_questions: Iterable[str] = (),
    example: dict | None = None,
) -> ReasoningGymSource:
    """A TRL conversational dataset and its reward function from a reasoning-gym task.

    `task`: a task name (with `config`, a dict of the task's config keys, and `size`/`seed`) or a reasoning-gym
    dataset object (then `config`, `size` and `seed` must stay at their defaults). `instruction`: appended to
    each question on a new line (`None`: the question alone). `system_prompt`: a system message before it (`None`:
    none, and the chat template adds its default if it has one). `exclude_questions`:
    questions whose entries are left out (counted in `excluded`). `example`: an entry (`question`, `answer`, optionally
    `reply`) shown before each question as a worked exchange: the question with the instruction, then `reply`
    (default `Answer: <answer>`) as the assistant's message. Small models follow the answer format far more often
    after one. Its question is left out of the dataset (see `worked_example`).
    """
    from datasets import Dataset

    if isinstance(task, str):
        procedural = make_procedural_dataset(task, config, size, seed)
        name = task
    elif _is_procedural_dataset(task):
        if config is not None:
            raise ReasoningGymError(
                "reasoning_gym_source: config applies to a task name; a dataset object carries its own config."
            )
        procedural = task
        name = getattr(getattr(task, "config", None), "__class__", type(task)).__name__.removesuffix("Config")
    else:
        raise ReasoningGymError(
            f"reasoning_gym_source: task must be a reasoning-gym task name or dataset object (with score_answer), "
            f"got {type(task).__name__}."
        )
    excluded_questions = set(exclude_questions) | ({example["question"]} if example is not None else set())
    entries, rows, excluded = {}, [], 0
    for index in range(len(procedural)):
        entry = procedural[index]
        if entry["question"] in excluded_questions:
            excluded += 1
            continue
        entries[index] = entry
        rows.append(_row(entry, index, instruction, system_prompt, example))
    if not rows:
        raise ReasoningGymError(
            f"reasoning-gym task {name!r}: all {len(procedural)} generated entries were excluded as evaluation "
            "questions; raise size or widen the task's config."
        )
    return ReasoningGymSource(
        name=name,
        procedural_dataset=procedural,
        dataset=Dataset.from_list(rows),
        reward_func=ReasoningGymReward(procedural, entries, name),
        excluded=excluded,
        questions=[row["question"] for row in rows],
    )


def _user_message(question: str, instruction: str | None) -> dict:
    return {"role": "user", "content": question if instruction is None else f"{question}\n{instruction}"}


def _row(entry: dict, index: int, instruction: str | None, system_prompt: str | None, example: dict | None) -> dict:
    messages = [_user_message(entry["question"], instruction)]
    if example is not None:
        messages[:0] = [
            _user_message(example["question"], instruction),
            {"role": "assistant", "content": example.get("reply", f"Answer: {example['answer']}")},
        ]
    if system_prompt is not None:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return {"prompt": messages, "question": entry["question"], "answer": str(entry["answer"]), INDEX_COLUMN: index}


def worked_example(task: str, config: dict | None = None, seed: int = EXAMPLE_SEED) -> dict:
    """The first entry of `task` drawn with `seed`: the worked example shown before each question."""
    return make_procedural_dataset(task, config, size=1, seed=seed)[0]


def distinct_questions(source: ReasoningGymSource, limit: int) -> ReasoningGymSource:
    """`source` restricted to the first entry of each of its first `limit` distinct questions (an evaluation set
    should not count one question twice)."""
    seen, keep = set(), []
    for position, question in enumerate(source.questions):
        if question not in seen and len(seen) < limit:
            seen.add(question)
            keep.append(position)
    return dataclasses.replace(
        source, dataset=source.dataset.select(keep), questions=[source.questions[i] for i in keep]
    )
