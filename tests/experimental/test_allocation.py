"""The allocation decisions' maths (`trl_variants.experimental.allocation`), without a model: each function's
contract and edge cases, determinism, and a seeded simulation of synthetic prompts."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from benchmarks.allocation_study import simulate
from trl_variants.experimental.allocation import (
    allocate_round,
    balanced_group,
    beta_power_mean,
    completion_outcomes,
    finished_prompts,
    mixed_probability,
    plan_scores,
    unseen_prompt_score,
)
from trl_variants.experimental.prompt_skipping.posterior import (
    PRIOR,
    RIGHT_MEMORY_FACTOR,
    group_successes,
    informative_probability,
    posterior_decays,
)

G = 8


@pytest.mark.parametrize(("a", "b"), [(1.0, 1.0), (2.0, 3.0), (0.05, 0.05), (7.5, 0.3)])
@pytest.mark.parametrize("draws", [0, 1, 2, 8, 31])
def test_beta_power_mean_is_the_beta_distributions_moment(a, b, draws):
    # E[q**d] = B(a + d, b) / B(a, b), from the log-gamma function.
    for first, second in ((a, b), (b, a)):
        moment = math.exp(math.lgamma(first + draws) - math.lgamma(first) + math.lgamma(first + second)
                          - math.lgamma(first + second + draws))
        assert beta_power_mean(first, second, draws) == pytest.approx(moment, rel=1e-9)


def expected_informative(a: float, b: float, draws: int) -> float:
    """E[1 - q**d - (1 - q)**d] for q ~ Beta(a, b), by numerical integration (independent of the closed form)."""
    density = stats.beta(a, b).pdf
    value, _ = integrate.quad(lambda q: informative_probability(q, draws) * density(q), 0, 1, limit=200)
    return value


@pytest.mark.parametrize(("a", "b"), [(1.0, 1.0), (2.0, 5.0), (0.5, 0.7)])
@pytest.mark.parametrize("draws", [2, 4, 8])
def test_fresh_prompt_mixed_probability_is_the_posterior_mean_of_the_informative_probability(a, b, draws):
    assert mixed_probability([a], [b], [0], [0], [draws])[0] == pytest.approx(expected_informative(a, b, draws), rel=1e-6)
    # Uniform posterior in closed form: 1 - 2 / (d + 1).
    assert mixed_probability([1.0], [1.0], [0], [0], [draws])[0] == pytest.approx((draws - 1) / (draws + 1))


@pytest.mark.parametrize("pass_rate", [0.0, 0.1, 0.5, 0.97, 1.0])
def test_a_sure_pass_rate_gives_knapsack_rls_informative_probability(pass_rate):
    # A posterior concentrated at p (p = 0 and p = 1 included) gives 1 - p**n - (1 - p)**n, the plug-in value.
    strength = 1e7
    alpha, beta = max(pass_rate * strength, 1e-9), max((1 - pass_rate) * strength, 1e-9)
    found = mixed_probability([alpha], [beta], [0], [0], [G])[0]
    assert found == pytest.approx(float(informative_probability(pass_rate, G)), abs=1e-5)


def test_outcomes_so_far_change_the_probability_as_they_must():
    # Both answers seen: mixed whatever comes next, no draw needed.
    assert mixed_probability([0.05, 0.05], [0.05, 0.05], [1, 3], [1, 5], [0, 4]).tolist() == [1.0, 1.0]
    # Nothing mixed and no draw: not mixed.
    assert mixed_probability([1.0, 1.0], [1.0, 1.0], [0, 3], [0, 0], [0, 0]).tolist() == [0.0, 0.0]
    # m right answers under a uniform prior: a wrong one in d more draws has probability d / (m + 1 + d).
    for m, d in [(1, 1), (4, 4), (8, 2)]:
        assert mixed_probability([1.0], [1.0], [m], [0], [d])[0] == pytest.approx(d / (m + 1 + d))
        assert mixed_probability([1.0], [1.0], [0], [m], [d])[0] == pytest.approx(d / (m + 1 + d))
    # More draws never lower it; more evidence of a sure outcome lowers it.
    by_draws = mixed_probability([PRIOR] * 5, [PRIOR] * 5, [0] * 5, [4] * 5, [1, 2, 4, 8, 16])
    assert np.all(np.diff(by_draws) > 0)
    by_evidence = mixed_probability([PRIOR] * 4, [PRIOR] * 4, [0] * 4, [1, 2, 8, 32], [4] * 4)
    assert np.all(np.diff(by_evidence) < 0)


def test_plans_and_scores():
    #            fresh  mixed, 3 in   mixed, 8 in   all wrong, 8 in   all right, 8 in (at max_draws)
    right = [0, 1, 4, 0, 8]
    wrong = [0, 2, 4, 8, 0]
    plan, score = plan_scores([PRIOR] * 5, [PRIOR] * 5, right, wrong, group_size=G, chunk=2, max_draws=8)
    assert plan.tolist() == [G, G - 3, 0, 0, 0]
    assert score[0] == pytest.approx(mixed_probability([PRIOR], [PRIOR], [0], [0], [G])[0] / G)
    assert score[1] == pytest.approx(1 / (G - 3))
    assert score[2:].tolist() == [0.0, 0.0, 0.0]
    plan, score = plan_scores([PRIOR] * 2, [PRIOR] * 2, [0, 0], [8, 16], group_size=G, chunk=2, max_draws=17)
    assert plan.tolist() == [2, 1]  # a chunk more, then only what max_draws leaves
    assert score[0] == pytest.approx(mixed_probability([PRIOR], [PRIOR], [0], [8], [2])[0] / 2)


def test_group_of_two():
    plan, score = plan_scores([1.0] * 3, [1.0] * 3, [0, 1, 1], [0, 0, 1], group_size=2, chunk=1, max_draws=4)
    assert plan.tolist() == [2, 1, 0]
    assert score.tolist() == pytest.approx([(1 / 3) / 2, 1 / 3, 0.0])
    assert balanced_group([True, False], 2).tolist() == [0, 1]
    assert balanced_group([True, True, True, False], 2).tolist() == [0, 3]


def test_a_round_grants_whole_plans_by_score_within_the_budget():
    # fresh; mixed, needing 6 more; fresh; half right in earlier steps but all right in this step's 8, asking for a
    # chunk of 2 (likely to show a wrong answer soon); all wrong in this step's 8, nothing earlier (likely hopeless).
    alpha = [PRIOR, PRIOR, PRIOR, PRIOR + 8, PRIOR]
    beta = [PRIOR, PRIOR, PRIOR, PRIOR + 8, PRIOR]
    right, wrong = [0, 1, 0, 8, 0], [0, 1, 0, 0, 8]
    sizes = {"group_size": G, "chunk": 2, "max_draws": 32}
    assert allocate_round(alpha, beta, right, wrong, budget=100, **sizes).tolist() == [G, 6, G, 2, 0]
    # Without the floor, the hopeless prompt gets its chunk too, last.
    assert allocate_round(alpha, beta, right, wrong, budget=100, min_score=0.0, **sizes).tolist() == [G, 6, G, 2, 2]
    # A budget smaller than the prompts: the mixed prompt first (it will surely train), then the half-right one, then
    # the earlier fresh one; the later fresh prompt's plan does not fit in the 3 left, which are not spent.
    assert allocate_round(alpha, beta, right, wrong, budget=6 + 2 + G + 3, **sizes).tolist() == [G, 6, 0, 2, 0]
    assert allocate_round(alpha, beta, right, wrong, budget=5, **sizes).tolist() == [0, 0, 0, 2, 0]
    assert allocate_round(alpha, beta, right, wrong, budget=0, **sizes).tolist() == [0] * 5
    # A higher min_score drops everything below it: here all but the mixed and the half-right prompts.
    assert allocate_round(alpha, beta, right, wrong, budget=100, min_score=0.1, **sizes).tolist() == [0, 6, 0, 2, 0]


def test_the_default_floor_is_what_an_unseen_prompt_scores_and_unseen_prompts_pass_it():
    for group_size in (2, 4, 8, 16):
        floor = unseen_prompt_score(group_size)
        plan, score = plan_scores([PRIOR], [PRIOR], [0], [0], group_size=group_size, chunk=2, max_draws=4 * group_size)
        assert score[0] == floor and plan[0] == group_size
        granted = allocate_round([PRIOR] * 3, [PRIOR] * 3, [0] * 3, [0] * 3, budget=10 * group_size,
                                 group_size=group_size, chunk=2, max_draws=4 * group_size)
        assert granted.tolist() == [group_size] * 3


def test_history_moves_completions_to_prompts_likely_informative():
    # Three prompts of earlier evidence: always wrong (0 of 16), half right (8 of 16), always right (16 of 16).
    alpha = PRIOR + np.array([0.0, 8.0, 16.0])
    beta = PRIOR + np.array([16.0, 8.0, 0.0])
    granted = allocate_round(alpha, beta, [0, 0, 0], [0, 0, 0], budget=G, group_size=G, chunk=2, max_draws=32)
    assert granted.tolist() == [0, G, 0]


def test_round_never_exceeds_its_budget_and_is_deterministic():
    rng = np.random.default_rng(0)
    for _ in range(200):
        size = int(rng.integers(1, 12))
        alpha, beta = rng.uniform(0.05, 20, size), rng.uniform(0.05, 20, size)
        right, wrong = rng.integers(0, 10, size), rng.integers(0, 10, size)
        budget = int(rng.integers(0, 60))
        granted = allocate_round(alpha, beta, right, wrong, budget, group_size=4, chunk=2, max_draws=16)
        assert granted.sum() <= budget and (granted >= 0).all()
        # Another process holding the same gathered counts (as lists) decides the same.
        again = allocate_round(alpha.tolist(), beta.tolist(), right.tolist(), wrong.tolist(), budget, group_size=4,
                               chunk=2, max_draws=16)
        assert np.array_equal(granted, again)


def test_finished_prompts_are_mixed_with_a_whole_group():
    right, wrong = [0, 1, 1, 4, 8, 7], [0, 1, 7, 4, 0, 0]
    assert finished_prompts(right, wrong, G).tolist() == [False, False, True, True, False, False]
    assert finished_prompts([1, 1], [1, 0], 2).tolist() == [True, False]


@pytest.mark.parametrize(
    ("right", "expected"),
    [
        ([1, 1, 1, 0, 1, 1, 1, 1, 0], [0, 1, 3, 8]),  # two of each, earliest first
        ([1, 1, 1, 1, 1, 0], [0, 1, 2, 5]),  # one wrong answer: the right side tops up
        ([0, 0, 1, 0, 0, 0], [0, 1, 2, 3]),  # one right answer: the wrong side tops up
        ([0, 0, 0, 0, 0], [0, 1, 2, 3]),  # degenerate (a fallback group): the first G
    ],
)
def test_balanced_group(right, expected):
    chosen = balanced_group(np.array(right, dtype=bool), 4)
    assert chosen.tolist() == expected
    assert balanced_group(right, 4).tolist() == expected  # 0/1 lists work too


def test_balanced_group_of_odd_size_gives_the_extra_row_to_the_wrong_side():
    assert balanced_group([1, 0, 1, 0, 1, 0], 5).tolist() == [0, 1, 2, 3, 5]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mixed_probability([1.0], [1.0, 1.0], [0], [0], [1]), "mixed_probability: alpha, beta, right, wrong, draws must be 1-D"),
        (lambda: mixed_probability([1.0], [1.0], [-1], [0], [1]), "mixed_probability: right must be >= 0"),
        (lambda: mixed_probability([0.0], [1.0], [0], [0], [1]), "mixed_probability: alpha and beta must be > 0"),
        (lambda: plan_scores([1.0], [1.0], [0], [0], group_size=0, chunk=1, max_draws=4), "plan_scores: group_size must be an integer >= 1"),
        (lambda: plan_scores([1.0], [1.0], [0], [0], group_size=4, chunk=1.5, max_draws=4), "plan_scores: chunk must be an integer >= 1"),
        (lambda: plan_scores([1.0], [1.0], [0], [0], group_size=4, chunk=1, max_draws=3), "plan_scores: max_draws must be >= group_size"),
        (lambda: allocate_round([1.0], [1.0], [0], [0], -1, group_size=4, chunk=1, max_draws=4), "allocate_round: budget must be >= 0"),
        (lambda: balanced_group([1, 0, 1], 4), "balanced_group: needs a 1-D array of at least group_size=4"),
        (lambda: balanced_group([1, 0], 0), "balanced_group: group_size must be an integer >= 1"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_one_clear_line(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as raised:
        call()
    assert "\n" not in str(raised.value)


# The simulation (benchmarks/allocation_study/simulate.py): synthetic prompts with fixed true pass rates, the
# allocation run step by step against the exact yield of G completions per prompt.


@pytest.mark.parametrize(
    ("spread", "least_ratio"),
    [
        ("U-shaped, Beta(0.3, 0.3), 256 prompts", 1.2),  # most prompts near always right or always wrong, as in real data
        ("uniform on [0, 1], 256 prompts", 1.0),  # little to gain, but not nothing
        ("100 never right, 60 always right, 96 uniform", 1.5),
    ],
)
def test_allocation_yields_more_informative_groups_per_completion_than_g_per_prompt(spread, least_ratio):
    ratios = []
    for seed in range(3):
        pass_rates = simulate.SPREADS[spread](np.random.default_rng(100 + seed))
        allocation = simulate.allocation_informative_per_completion(pass_rates, 4, np.random.default_rng(seed), steps=100)
        ratios.append(allocation / simulate.g_per_prompt_informative_per_completion(pass_rates))
    assert np.mean(ratios) > least_ratio, (spread, ratios)


def test_the_simulation_script_runs(capsys):
    simulate.main(["--smoke"])
    printed = capsys.readouterr().out
    assert "python -m benchmarks.allocation_study.simulate --smoke" in printed
    assert all(name in printed for name in simulate.SPREADS)


@pytest.mark.parametrize(
    "scores",
    [[1.0, 0.0, 0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [-1.0, 1.0, math.nan, 1.0, -1.0],
     [0.5, 0.5, math.nan], [math.nan, math.nan], [2.0, 1.0, 1.0 + 1e-9, 0.0], [1.0, 0.99999994]],
)
def test_completion_outcomes_follow_the_posteriors_rule(scores):
    """Per completion, the rule `group_successes` counts by (a prompt's completions taken as one group)."""
    import torch

    right, scored = completion_outcomes(scores, tolerance=1e-6)
    tensor = torch.tensor([scores], dtype=torch.float64)
    finite = tensor[~torch.isnan(tensor)]
    informative = torch.tensor([len(finite) >= 2 and float(finite.max() - finite.min()) > 1e-6])
    expected_right, expected_scored = group_successes(tensor, informative)
    assert right.sum() == expected_right[0] and scored.sum() == expected_scored[0]
    assert scored.tolist() == [not math.isnan(score) for score in scores]
    assert not (right & ~scored).any()
    if informative[0]:  # a mixed prompt: its right completions all score above its wrong ones
        assert min(np.asarray(scores)[right]) > max(np.asarray(scores)[scored & ~right])


def test_posterior_decays_halve_wrong_evidence_per_memory_and_right_evidence_slower():
    decay_right, decay_wrong = posterior_decays(memory_epochs=2.0, dataset_rows=80, batch_groups=4)
    # 2 passes over 80 prompts at 4 a step: wrong evidence halves in 40 steps, right evidence in 8 times as many.
    assert decay_wrong**40 == pytest.approx(0.5) and decay_right ** (40 * RIGHT_MEMORY_FACTOR) == pytest.approx(0.5)
    # A dataset smaller than a batch counts as one batch: one pass is one step.
    assert posterior_decays(1.0, 2, 4)[1] == pytest.approx(0.5)


def synthetic_allocator(num_processes: int, dataset_size: int = 40, max_rounds: int = 4):
    """An `Allocator` over a map-style refill source, with settings as a trainer's config has them."""
    from types import SimpleNamespace

    from trl_variants.dynamic_sampling.prompt_sources import RefillSampler
    from trl_variants.experimental.allocation import Allocator

    args = SimpleNamespace(skip_memory_epochs=1.0, generation_batch_size=4 * 4, dynamic_sampling_max_rounds=max_rounds,
                           dynamic_sampling_tolerance=1e-6)  # fmt: skip
    return Allocator(args, 4, RefillSampler(dataset_size=dataset_size, seed=1), num_processes)


def synthetic_round(score, rounds: list):
    """`run_round` for the allocator without a model: one row per source, `score(key, n)` for the prompt's n-th
    completion of the step, recorded in `rounds`."""
    import torch

    drawn: dict[int, int] = {}

    def run_round(sources):
        rounds.append(list(sources))
        rows = []
        for key in sources:
            drawn[key] = drawn.get(key, 0) + 1
            rows.append((key, drawn[key]))
        return rows, torch.tensor([score(key, n) for key, n in rows], dtype=torch.float64)

    return run_round


def request_missing(missing: int, rate) -> int:
    return max(missing, 0)


@pytest.mark.parametrize("num_processes", [1, 3])
def test_an_allocated_step_forms_groups_of_g_from_each_prompts_completions(num_processes):
    # Prompts with an even key are right on every other completion; odd keys never right.
    allocator, rounds = synthetic_allocator(num_processes), []

    def score(key, n):
        return float(key % 2 == 0 and n % 2 == 1)

    groups, generated, used = allocator.sample([0, 1, 2, 3], 4, 0, synthetic_round(score, rounds), request_missing)
    assert used == len(rounds) and sum(len(r) for r in rounds) == len(generated)
    # Each round splits evenly over the processes (16 completions for 3 processes: the padding goes to a granted
    # prompt).
    assert all(len(sources) % num_processes == 0 for sources in rounds)
    assert all(len(group) == 4 and len({key for key, _ in group}) == 1 for group in groups)
    informative = [group for group in groups if len({score(*row) for row in group}) > 1]
    assert len(informative) >= 4
    # A balanced group: two right, two wrong.
    assert all(sum(score(*row) for row in group) == 2 for group in informative)
    # The posterior recorded every generated prompt once, with the completions scored.
    generated_keys = {key for key, _ in generated}
    assert set(np.flatnonzero(allocator.posterior.updated >= 0)) == generated_keys
    assert allocator.posterior.right.sum() + allocator.posterior.wrong.sum() == len(generated)


def test_a_step_of_degenerate_prompts_still_generates_a_batch_to_fill():
    allocator, rounds = synthetic_allocator(2, max_rounds=1), []
    # Two earlier steps taught the posterior that every prompt is wrong: most candidates score below the floor.
    for step in range(2):
        allocator.sample(list(range(4)), 4, step, synthetic_round(lambda key, n: 0.0, []), request_missing)
    groups, _, _ = allocator.sample([0, 1, 2, 3], 4, 2, synthetic_round(lambda key, n: 0.0, rounds), request_missing)
    assert len(groups) >= 4 and all(len(group) == 4 for group in groups)
    assert all(len(sources) % 2 == 0 for sources in rounds)


def test_allocated_steps_are_deterministic():
    def trace():
        allocator, rounds = synthetic_allocator(2), []
        for step in range(3):
            allocator.sample([4 * step + i for i in range(4)], 4, step,
                             synthetic_round(lambda key, n: float((key * 7 + n) % 3 == 0), rounds), request_missing)
        return rounds, {name: array.tolist() for name, array in allocator.posterior.arrays().items()}

    assert trace() == trace()
