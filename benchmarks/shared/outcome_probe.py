"""Records, from inside the accuracy reward, what every generated completion was: its length, whether it was right,
and whether its group was degenerate.

Every arm calls its reward functions once on every generated batch, dynamic sampling's extra rounds included (its
replay of kept completions into TRL's scoring pass reuses the stored rewards and does not call them again), so
this sees each generated completion exactly once, whatever the arm.
"""

import functools
from collections import defaultdict

from .stats import count_group_outcomes, group_spans

# DAPOConfig's default `dynamic_sampling_tolerance`: a group this flat has no signal for dynamic sampling either.
EQUAL_SCORE_TOLERANCE = 1e-6


class OutcomeProbe:
    """Wraps a +1/-1 accuracy reward; per optimizer step (TRL's `trainer_state.global_step` at the call, i.e. the
    number of steps already taken) it accumulates:

    - `tokens`, `completions`: completion tokens and completions generated (prompt tokens are not counted);
    - `correct_tokens`/`correct`, `wrong_tokens`/`wrong`: the same split by the reward's verdict (> 0 is right);
    - `groups`, `all_correct`, `all_wrong`: groups of `num_generations` consecutive completions of one prompt, and
      those whose completions were all right or all wrong by this reward (the soft overlong punishment is ignored);
    - `equal_score_groups`: groups whose rewards are all equal (zero advantage for every completion), which differ
      from the all-right or all-wrong groups where the reward gives partial credit;
    - `ungrouped_completions`: completions in no whole group (`stats.group_spans`: the allocation mode's continuation
      rounds; 0 for `GRPOTrainer` and dynamic sampling without allocation).

    `passed(reward)` says whether a completion is right: `reward > 0` by default (a +1/-1 or 0/1 reward). With
    `group_key`, the name of a dataset column the reward receives (such as `reasoning_gym_index`), each step's row also
    counts the groups generated for each value of that column, under `"groups_of/<value>"`.
    """

    FIELDS = ("tokens", "completions", "correct_tokens", "correct", "wrong_tokens", "wrong", "groups", "all_correct",
              "all_wrong", "equal_score_groups", "ungrouped_completions")

    def __init__(self, reward_func, num_generations: int, passed=lambda reward: reward > 0, group_key: str | None = None):
        self.num_generations, self.passed = num_generations, passed
        self.per_step: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(self.FIELDS, 0))

        @functools.wraps(reward_func)  # keeps `__name__`, so TRL's `rewards/<name>/mean` metrics keep their names
        def recorded(prompts, completions, completion_ids, trainer_state=None, **kwargs):
            rewards = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids,
                                  trainer_state=trainer_state, **kwargs)
            step = trainer_state.global_step if trainer_state else 0
            self.record(step, prompts, completion_ids, rewards, None if group_key is None else kwargs[group_key])
            return rewards

        self.reward_func = recorded

    def record(self, step: int, prompts, completion_ids, rewards, group_values=None) -> None:
        """Counts one reward call into step `step`'s row; with `group_values` (the `group_key` column), each group
        (`stats.group_spans`) also under the value of its first row."""
        correct = [reward is not None and self.passed(reward) for reward in rewards]
        row = self.per_step[step]
        for ids, right in zip(completion_ids, correct, strict=True):
            row["tokens"] += len(ids)
            row["completions"] += 1
            row["correct_tokens" if right else "wrong_tokens"] += len(ids)
            row["correct" if right else "wrong"] += 1
        outcomes = count_group_outcomes(prompts, correct, self.num_generations)
        row["groups"] += outcomes.groups
        row["all_correct"] += outcomes.all_correct
        row["all_wrong"] += outcomes.all_wrong
        row["ungrouped_completions"] += outcomes.ungrouped
        for start, stop in group_spans(prompts, self.num_generations)[0]:
            group = [reward for reward in rewards[start:stop] if reward is not None]
            row["equal_score_groups"] += bool(group) and max(group) - min(group) <= EQUAL_SCORE_TOLERANCE
            if group_values is not None:
                key = f"groups_of/{group_values[start]}"
                row[key] = row.get(key, 0) + 1

    def series(self, num_steps: int) -> dict[str, list[int]]:
        """One list per field, indexed by optimizer step 0..num_steps-1 (0 where a step generated nothing)."""
        return {name: [self.per_step[step][name] if step in self.per_step else 0 for step in range(num_steps)]
                for name in self.FIELDS}
