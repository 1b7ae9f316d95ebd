"""A second embedded task, for benchmarks: sums of graded difficulty whose completions the policy can lengthen
(docs/benchmarks.md describes it and the warm-started policy's skill per level).

A completion may show its working, the running partial sums, before the final-answer marker `#` (`45 106#106`), or
go straight to it (`#106`); only the text after the last marker is checked. Difficulty is graded by the number of
operands and their digits (`LEVELS`). Everything is built locally and is deterministic under a seed.
"""

import math
import random
from dataclasses import dataclass, field

from datasets import Dataset
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from .model import build_tiny_model, greedy_correct, warm_start
from .tokenizer import build_char_tokenizer

ANSWER_MARKER = "#"
GRADED_CHARACTERS = "0123456789+= " + ANSWER_MARKER


@dataclass(frozen=True)
class Level:
    """Sums of one operand per entry of `operand_digits`, each drawn uniformly among the numbers with exactly that
    many digits (0 counts as one digit), so no prompt belongs to two levels."""

    operand_digits: tuple[int, ...]


# Easiest first. Each level adds an operand or a digit; the sums stay short enough for a 64-token context.
LEVELS: dict[int, Level] = {
    1: Level(operand_digits=(1, 1)),
    2: Level(operand_digits=(1, 1, 1)),
    3: Level(operand_digits=(2, 1)),
    4: Level(operand_digits=(2, 2)),
    5: Level(operand_digits=(2, 2, 2)),
}


def operand_range(digits: int) -> tuple[int, int]:
    return (0, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)
# Long enough for any worked completion, short enough that rechecked working on the hardest level is cut off.
MAX_COMPLETION_LENGTH = 24
HELD_OUT_PER_LEVEL = 90
TRAIN_PER_LEVEL = 400
# How often the warm start's target for a problem is each style of completion.
STYLE_SHARES = {"direct": 0.4, "worked": 0.4, "rechecked": 0.2}
WARM_START_STEPS = 800
WARM_START_BATCH_SIZE = 128


def _problem(operands: list[int], level: int) -> dict:
    return {"prompt": "+".join(map(str, operands)) + "=", "answer": str(sum(operands)), "level": level}


def level_problems(level: int, count: int, rng: random.Random) -> list[dict]:
    """`count` distinct problems of `level` (all of them when the level has fewer), in the order drawn."""
    ranges = [operand_range(digits) for digits in LEVELS[level].operand_digits]
    space = math.prod(high - low + 1 for low, high in ranges)
    problems, seen = [], set()
    while len(problems) < min(count, space):
        operands = tuple(rng.randint(low, high) for low, high in ranges)
        if operands not in seen:
            seen.add(operands)
            problems.append(_problem(list(operands), level))
    return problems


def split_graded_problems(
    seed: int, train_per_level: int = TRAIN_PER_LEVEL, held_out_per_level: int = HELD_OUT_PER_LEVEL
) -> tuple[list[dict], list[dict]]:
    """Disjoint train and held-out problems, stratified: each level gives `held_out_per_level` held-out problems
    (a level with fewer distinct problems gives half of them) and up to `train_per_level` training ones."""
    rng = random.Random(seed)
    train, held_out = [], []
    for level in LEVELS:
        drawn = level_problems(level, train_per_level + held_out_per_level, rng)
        num_held_out = min(held_out_per_level, len(drawn) // 2)
        held_out += drawn[:num_held_out]
        train += drawn[num_held_out:]
    return train, held_out


def worked_completion(prompt: str) -> str:
    """The completion that shows every running partial sum before the marker: `1+2+3=` -> `3 6#6`."""
    operands = [int(term) for term in prompt.rstrip("=").split("+")]
    partial_sums, total = [], operands[0]
    for operand in operands[1:]:
        total += operand
        partial_sums.append(str(total))
    return " ".join(partial_sums) + ANSWER_MARKER + str(total)


def rechecked_completion(prompt: str) -> str:
    """The working written twice before the marker, a longer habit the policy can grow or drop:
    `1+2+3=` -> `3 6 3 6#6`."""
    working, answer = worked_completion(prompt).split(ANSWER_MARKER)
    return f"{working} {working}{ANSWER_MARKER}{answer}"


def direct_completion(prompt: str) -> str:
    return ANSWER_MARKER + str(sum(int(term) for term in prompt.rstrip("=").split("+")))


def final_answer(completion: str) -> str | None:
    """The text after the last answer marker, stripped; `None` when the completion has no marker."""
    if ANSWER_MARKER not in completion:
        return None
    return completion.rsplit(ANSWER_MARKER, 1)[1].strip()


def graded_accuracy_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """+1.0 when the text after the last `#` equals the dataset's `answer` column, -1.0 otherwise (DAPO's rule-based
    reward); a completion without the marker is wrong."""
    if len(completions) != len(answer):
        raise ValueError(
            f"graded_accuracy_reward: got {len(completions)} completions but {len(answer)} answers; "
            "they must match one to one."
        )
    return [1.0 if final_answer(text) == gold else -1.0 for text, gold in zip(completions, answer, strict=True)]


COMPLETION_STYLES = {"direct": direct_completion, "worked": worked_completion, "rechecked": rechecked_completion}


def warm_start_examples(problems: list[dict], seed: int) -> list[dict[str, str]]:
    """One supervised target per problem, its style drawn with `STYLE_SHARES`."""
    rng = random.Random(seed)
    styles = rng.choices(list(STYLE_SHARES), weights=list(STYLE_SHARES.values()), k=len(problems))
    return [
        {"prompt": problem["prompt"], "answer": COMPLETION_STYLES[style](problem["prompt"])}
        for problem, style in zip(problems, styles, strict=True)
    ]


@dataclass
class GradedTask:
    """The warm-started policy, its tokenizer and the stratified problems; the reward is `graded_accuracy_reward`."""

    model: Qwen2ForCausalLM
    tokenizer: PreTrainedTokenizerFast
    train_dataset: Dataset
    train_problems: list[dict]
    eval_problems: list[dict]
    max_completion_length: int = MAX_COMPLETION_LENGTH
    levels: list[int] = field(default_factory=lambda: list(LEVELS))

    @property
    def reward_funcs(self):
        return [graded_accuracy_reward]

    def _held_out_correct(self, model) -> list[bool]:
        return greedy_correct(
            model or self.model, self.tokenizer, self.eval_problems, self.max_completion_length, final_answer
        )

    def held_out_accuracy_by_level(self, model=None) -> dict[int, float]:
        by_level = {level: [] for level in self.levels}
        for problem, right in zip(self.eval_problems, self._held_out_correct(model), strict=True):
            by_level[problem["level"]].append(right)
        return {level: sum(values) / len(values) for level, values in by_level.items()}

    def held_out_accuracy(self, model=None) -> float:
        correct = self._held_out_correct(model)
        return sum(correct) / len(correct)


def make_graded_task(
    seed: int = 0, warm_start_steps: int = WARM_START_STEPS, hidden_size: int = 64, num_layers: int = 2
) -> GradedTask:
    """Builds the tokenizer, the warm-started policy and the stratified train/held-out problems."""
    tokenizer = build_char_tokenizer(GRADED_CHARACTERS)
    train_problems, eval_problems = split_graded_problems(seed)
    model = build_tiny_model(tokenizer, seed, hidden_size=hidden_size, num_layers=num_layers)
    # Two targets per problem, so that most problems are seen in two styles.
    examples = warm_start_examples(train_problems, seed) + warm_start_examples(train_problems, seed + 1)
    warm_start(model, tokenizer, examples, warm_start_steps, seed, batch_size=WARM_START_BATCH_SIZE)
    return GradedTask(
        model=model,
        tokenizer=tokenizer,
        train_dataset=Dataset.from_list(train_problems),
        train_problems=train_problems,
        eval_problems=eval_problems,
    )
