"""DAPO's rule-based accuracy reward: +1 when the final answer matches the solution, -1 otherwise.

It follows TRL's reward-function protocol: keyword arguments `completions`, `completion_ids` and the dataset's
columns, one float (or `None` to skip) per completion.
"""

import re

_ANSWER_LINE = re.compile(r"Answer\s*:\s*(.+)", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


def completion_text(completion) -> str:
    """A completion's text; a conversational completion is a list of messages, the answer in the last one."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def extract_final_answer(text: str) -> str:
    """The final answer of a completion: the last `Answer:` line (DAPO-Math-17k's format), else the last
    `\\boxed{...}`, else the whole text stripped."""
    answer_lines = _ANSWER_LINE.findall(text)
    if answer_lines:
        return answer_lines[-1].strip().strip("$").strip()
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    return text.strip()


def _normalise(answer: str) -> str:
    return answer.replace(" ", "").replace("$", "").rstrip(".").lower()


def _math_verify():
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    return parse, verify


def dapo_accuracy_reward(completions: list, solution: list[str] | None = None, **kwargs) -> list[float | None]:
    """DAPO's rule-based reward: +1.0 when the final answer equals the gold answer, -1.0 otherwise.

    The gold answer is read from the dataset column `solution` (TRL's convention) or, failing that, `answer`.
    With the `math` extra installed, equality is decided by math-verify, so `1/2`, `0.5` and `\\frac{1}{2}` agree;
    a gold answer math-verify cannot parse gives `None`, which TRL skips. Without it, answers are compared as
    normalised strings.
    """
    gold_answers = solution if solution is not None else kwargs.get("answer")
    if gold_answers is None:
        raise ValueError(
            "dapo_accuracy_reward needs the gold answers in a dataset column named 'solution' or 'answer'; "
            f"the batch has columns {sorted(k for k in kwargs if not k.startswith(('trainer_state', 'log_')))}."
        )
    if len(gold_answers) != len(completions):
        raise ValueError(
            f"dapo_accuracy_reward: got {len(completions)} completions but {len(gold_answers)} gold answers."
        )
    verifier = _math_verify()
    rewards: list[float | None] = []
    for completion, gold in zip(completions, gold_answers, strict=True):
        predicted = extract_final_answer(completion_text(completion))
        if verifier is None:
            rewards.append(1.0 if _normalise(predicted) == _normalise(str(gold)) else -1.0)
            continue
        parse, verify = verifier
        gold_parsed = parse(f"${gold}$")
        if not gold_parsed:
            rewards.append(None)
            continue
        rewards.append(1.0 if verify(gold_parsed, parse(f"${predicted}$")) else -1.0)
    return rewards
