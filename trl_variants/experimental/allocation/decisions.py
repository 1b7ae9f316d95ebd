"""Spending a step's completions where they teach: per round, how many completions each candidate prompt gets, and
which G rows of a prompt's completions form its trained group. Pure functions, no model (docs/allocation.md).

The ideas followed, from their papers (facts, not code):

- Knapsack RL (arXiv 2509.25849): give completions to prompts by the value of the learning signal they are expected
  to produce per completion spent, with the value built on the probability that the group is informative,
  `1 - p**n - (1 - p)**n`. Here the pass rate `p` is not a point estimate but the per-prompt Beta posterior of
  `experimental/prompt_skipping/posterior.py`, so the probability is its posterior-predictive form (below), and the
  knapsack is filled greedily by value per completion (the paper's InfoGain factor is not used: every informative
  group counts as one).
- Reinforce-Ada (arXiv 2510.04996): sample a prompt in rounds and stop once it has both a right and a wrong answer;
  then train a FIXED-SIZE group of G rows chosen balanced between right and wrong. Fixed-size groups leave TRL's
  advantage and loss code untouched. (Its advantage baseline from every completion of the prompt is not followed:
  it would change TRL's advantage.)

The posterior-predictive probability that a prompt's completions are mixed (at least one right and one wrong) after
`d` more draws, given `r` right and `w` wrong so far this step and the posterior `Beta(alpha, beta)` from earlier
steps, with `a = alpha + r`, `b = beta + w` and `E[q**d] = prod_{j<d} (a + j) / (a + b + j)`:

    P_mixed = 1                                                  if r > 0 and w > 0
            = 1 - [w == 0] E[q**d] - [r == 0] E[(1 - q)**d]       otherwise, d >= 1 (0 when d = 0)

A prompt's plan is the completions that could make it a trained group: `G - n` more if it is mixed (`n = r + w`),
otherwise `max(G - n, chunk)`, never past `max_draws` in all. So a fresh prompt's plan is a whole group of G, like
`GRPOTrainer`'s, and one that is still all right or all wrong after G draws asks for `chunk` more at a time. Its
score is `P_mixed(plan) / plan`, the expected trained groups per completion. Each round grants whole plans in order
of score (ties: the earlier prompt first) until the round's budget is spent, so a prompt continues only while its
score beats the other candidates'; one scored below `min_score` (by default what a prompt never seen scores: the
data set always has one) gets nothing more this step.

A variant that first screened fresh prompts with `chunk < G` draws was tried while designing this and not kept: in
a simulation like `benchmarks/allocation_study/simulate.py` it gave fewer informative groups per completion than
whole first groups on every spread of pass rates tried (docs/allocation.md).

Every decision is a function of the counts alone, so processes that hold the same gathered counts decide alike.
"""

import numpy as np
import torch

from ..prompt_skipping.posterior import PRIOR, completion_successes


def _counts(function: str, **arrays) -> list[np.ndarray]:
    """The arrays as float64 of one common 1-D shape, each >= 0; `ValueError` otherwise."""
    converted = [np.asarray(values, dtype=np.float64) for values in arrays.values()]
    shapes = {array.shape for array in converted}
    if len(shapes) != 1 or len(converted[0].shape) != 1:
        raise ValueError(f"{function}: {', '.join(arrays)} must be 1-D arrays of one length, got shapes "
                         f"{[array.shape for array in converted]}.")
    for name, array in zip(arrays, converted, strict=True):
        if (array < 0).any() or np.isnan(array).any():
            raise ValueError(f"{function}: {name} must be >= 0 everywhere, got {array.tolist()}.")
    return converted


def beta_power_mean(a, b, draws) -> np.ndarray:
    """`E[q**draws]` for `q ~ Beta(a, b)`: `prod_{j < draws} (a + j) / (a + b + j)` (1 when draws = 0); with `a` and
    `b` swapped, `E[(1 - q)**draws]`. Exact, elementwise, for integer draws >= 0 and a, b > 0."""
    a, b, draws = (np.asarray(values, dtype=np.float64) for values in np.broadcast_arrays(a, b, draws))
    result = np.ones(a.shape)
    for j in range(int(draws.max(initial=0))):
        result = np.where(j < draws, result * (a + j) / (a + b + j), result)
    return result


def mixed_probability(alpha, beta, right, wrong, draws) -> np.ndarray:
    """Probability that a prompt's completions hold at least one right and one wrong answer after `draws` more,
    given `right` and `wrong` so far this step and its earlier posterior `Beta(alpha, beta)` (module docstring).
    With `alpha = p * s`, `beta = (1 - p) * s` and `s` large it tends to `1 - p**n - (1 - p)**n` for a fresh prompt."""
    alpha, beta, right, wrong, draws = _counts("mixed_probability", alpha=alpha, beta=beta, right=right, wrong=wrong,
                                               draws=draws)
    if (alpha <= 0).any() or (beta <= 0).any():
        raise ValueError(f"mixed_probability: alpha and beta must be > 0 (a Beta posterior), got {alpha.tolist()} and "
                         f"{beta.tolist()}.")
    a, b = alpha + right, beta + wrong
    all_right, all_wrong = beta_power_mean(a, b, draws), beta_power_mean(b, a, draws)
    unmixed = np.where(wrong == 0, all_right, 0.0) + np.where(right == 0, all_wrong, 0.0)
    probability = np.where(draws > 0, 1.0 - unmixed, 0.0)
    return np.where((right > 0) & (wrong > 0), 1.0, np.clip(probability, 0.0, 1.0))


def plan_scores(alpha, beta, right, wrong, group_size: int, chunk: int, max_draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, its plan (completions that could make it a trained group) and its score, the expected trained
    groups per completion of that plan (module docstring). A prompt that is mixed with `G` completions needs nothing
    (plan 0, score 0); so does one with `max_draws` completions."""
    _check_sizes("plan_scores", group_size=group_size, chunk=chunk, max_draws=max_draws)
    if max_draws < group_size:
        raise ValueError(f"plan_scores: max_draws must be >= group_size, got {max_draws} < {group_size}.")
    alpha, beta, right, wrong = _counts("plan_scores", alpha=alpha, beta=beta, right=right, wrong=wrong)
    drawn = right + wrong
    mixed = (right > 0) & (wrong > 0)
    wanted = np.where(mixed, group_size - drawn, np.maximum(group_size - drawn, chunk))
    plan = np.clip(np.minimum(wanted, max_draws - drawn), 0, None)
    score = np.where(plan > 0, mixed_probability(alpha, beta, right, wrong, plan) / np.maximum(plan, 1), 0.0)
    return plan.astype(np.int64), score


def unseen_prompt_score(group_size: int) -> float:
    """The score of a prompt with no evidence (the posterior's prior, nothing drawn): `P_mixed(G) / G` under
    `Beta(PRIOR, PRIOR)`, what a completion is expected to teach when spent on a prompt never seen."""
    _check_sizes("unseen_prompt_score", group_size=group_size)
    return float(mixed_probability([PRIOR], [PRIOR], [0], [0], [group_size])[0] / group_size)


def allocate_round(alpha, beta, right, wrong, budget: int, group_size: int, chunk: int, max_draws: int,
                   min_score: float | None = None) -> np.ndarray:
    """Completions each prompt gets this round, at most `budget` in all: its whole plan, in order of score (ties:
    lower position first); a plan that does not fit in what is left is passed over for the next prompt's. Prompts
    scored 0 or below `min_score` get none: they are not continued this step. `min_score` defaults to
    `unseen_prompt_score(group_size)`: a prompt gets completions only while it is expected to teach at least as much
    per completion as a prompt never seen, which the data set always has (an unseen prompt scores exactly that)."""
    if budget < 0:
        raise ValueError(f"allocate_round: budget must be >= 0, got {budget}.")
    plan, score = plan_scores(alpha, beta, right, wrong, group_size, chunk, max_draws)
    if min_score is None:
        min_score = unseen_prompt_score(group_size)
    granted = np.zeros(len(plan), dtype=np.int64)
    left = budget
    for prompt in np.lexsort((np.arange(len(score)), -score)):  # score descending, then position
        if score[prompt] <= 0 or score[prompt] < min_score or plan[prompt] > left:
            continue
        granted[prompt] = plan[prompt]
        left -= plan[prompt]
    return granted


def finished_prompts(right, wrong, group_size: int) -> np.ndarray:
    """Which prompts can form a trained group: mixed (a right and a wrong answer) with at least `group_size`
    completions. They need no more completions; `balanced_group` picks their rows."""
    _check_sizes("finished_prompts", group_size=group_size)
    right, wrong = _counts("finished_prompts", right=right, wrong=wrong)
    return (right > 0) & (wrong > 0) & (right + wrong >= group_size)


def completion_outcomes(scores, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Per completion of one prompt (`scores` on the sampling metric, in generation order, NaN: unscored), whether it
    counts as right and whether it was scored: `posterior.completion_successes` over all of them as one group, which
    is informative when at least two are scored and highest - lowest > `tolerance` (`informative_group_mask`'s
    rule)."""
    row = torch.as_tensor(np.asarray(scores, dtype=np.float64)).reshape(1, -1)
    scored = ~torch.isnan(row)
    spread = row[scored].max() - row[scored].min() if scored.any() else torch.tensor(0.0)
    informative = torch.tensor([int(scored.sum()) >= 2 and float(spread) > tolerance])
    right, scored = completion_successes(row, informative)
    return right[0].numpy(), scored[0].numpy()


def balanced_group(right, group_size: int) -> np.ndarray:
    """Positions of the `group_size` completions that form a prompt's trained group, from its completions' outcomes
    (`right`, in generation order): `min(#right, G // 2)` right ones and the rest wrong ones, topped up from the other
    side when one side is short, earliest generated first within each side; sorted. Deterministic."""
    right = np.asarray(right, dtype=bool)
    _check_sizes("balanced_group", group_size=group_size)
    if right.ndim != 1 or len(right) < group_size:
        raise ValueError(f"balanced_group: needs a 1-D array of at least group_size={group_size} outcomes, got shape "
                         f"{right.shape}.")
    rights, wrongs = np.flatnonzero(right), np.flatnonzero(~right)
    take_right = min(len(rights), group_size // 2)
    take_wrong = min(len(wrongs), group_size - take_right)
    take_right = group_size - take_wrong  # tops up the right side when the wrong side is short
    return np.sort(np.concatenate([rights[:take_right], wrongs[:take_wrong]]))


def _check_sizes(function: str, **sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{function}: {name} must be an integer >= 1, got {value!r}.")
