"""Purpose-made rewards for the dynamic-sampling tests, shared by the in-process tests and the torchrun script.

Each reward decides from the prompt whether a group can be informative, so the share of informative groups is
known by construction, and each records what it was asked to score so a test can count reward calls and recompute
every keep/drop decision.

Rewards that vary inside a group use the completion's position in the call: a process always scores whole
rounds whose groups are contiguous, and any part of a group a process holds has at least two rows, so
consecutive positions always give a group at least two different scores.
"""


def first_operand(prompt: str) -> int:
    """The toy task's prompts read `a+b=`; `a` keys every purpose-made reward."""
    return int(prompt.split("+", 1)[0])


def is_live_prompt(prompt: str) -> bool:
    """Prompts whose groups the half-degenerate reward makes informative: an even first operand."""
    return first_operand(prompt) % 2 == 0


class RecordingReward:
    """Base class: records every call's step, prompts, completion ids and returned rewards."""

    __name__ = "recording_reward"

    def __init__(self):
        self.calls: list[dict] = []

    def score(self, index: int, prompt: str, completion_ids: list[int]) -> float:
        raise NotImplementedError

    def __call__(self, prompts, completions, completion_ids, trainer_state, **kwargs):
        pairs = enumerate(zip(prompts, completion_ids, strict=True))
        rewards = [self.score(i, prompt, ids) for i, (prompt, ids) in pairs]
        self.calls.append(
            {
                "step": trainer_state.global_step,
                "prompts": list(prompts),
                "completion_ids": [list(ids) for ids in completion_ids],
                "rewards": rewards,
            }
        )
        return rewards

    @property
    def rows_scored(self) -> int:
        return sum(len(call["prompts"]) for call in self.calls)


class HalfDegenerateReward(RecordingReward):
    """Live prompts score the completion's position in its group (always informative); the others score 0
    for every completion (always degenerate)."""

    __name__ = "half_degenerate_reward"

    def __init__(self, num_generations: int):
        super().__init__()
        self.num_generations = num_generations

    def score(self, index, prompt, completion_ids):
        return float(index % self.num_generations) if is_live_prompt(prompt) else 0.0


class ConstantReward(RecordingReward):
    """Every completion is right: every group is degenerate."""

    __name__ = "constant_reward"

    def score(self, index, prompt, completion_ids):
        return 1.0


# Prompt classes of `ThreeWayAccuracyReward`, keyed on the first operand modulo 3.
LIVE, NOISE, ALL_CORRECT = 0, 1, 2


def prompt_class(prompt: str) -> int:
    return first_operand(prompt) % 3


class ThreeWayAccuracyReward(RecordingReward):
    """An accuracy reward (+1 right, -1 wrong) with three kinds of prompt:

    - LIVE: right and wrong alternate inside the group (informative);
    - NOISE: 1.0 and 0.99999994 alternate, float noise that must not count as a difference (degenerate);
    - ALL_CORRECT: +1 for every completion (degenerate on accuracy; only the overlong punishment can differ).
    """

    __name__ = "three_way_accuracy"

    def score(self, index, prompt, completion_ids):
        kind = prompt_class(prompt)
        if kind == LIVE:
            return 1.0 if index % 2 == 0 else -1.0
        if kind == NOISE:
            return 1.0 if index % 2 == 0 else 0.99999994
        return 1.0


def generated_groups(calls: list[dict], num_generations: int) -> list[dict]:
    """Splits recorded calls into groups: each with the step, prompt, completion ids and rewards of its rows."""
    groups = []
    for call in calls:
        for start in range(0, len(call["prompts"]), num_generations):
            rows = slice(start, start + num_generations)
            prompts = call["prompts"][rows]
            if len(set(prompts)) != 1:
                raise AssertionError(f"a reward call held a group that is not contiguous: {prompts}")
            groups.append(
                {
                    "step": call["step"],
                    "prompt": prompts[0],
                    "completion_ids": call["completion_ids"][rows],
                    "rewards": call["rewards"][rows],
                }
            )
    return groups
