"""The toy task's rule-based reward, in the DAPO form: +1 for an exactly right answer, -1 otherwise."""


def parse_answer(completion: str) -> str:
    """The answer is the completion up to its first space, with surrounding whitespace removed."""
    stripped = completion.strip()
    return stripped.split(" ", 1)[0] if stripped else ""


def toy_accuracy_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """+1.0 when the completion's answer equals the dataset's `answer` column, -1.0 otherwise."""
    if len(completions) != len(answer):
        raise ValueError(
            f"toy_accuracy_reward: got {len(completions)} completions but {len(answer)} answers; "
            "they must match one to one."
        )
    return [1.0 if parse_answer(text) == gold else -1.0 for text, gold in zip(completions, answer, strict=True)]
