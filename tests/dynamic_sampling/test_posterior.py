"""The posterior skip predictor's maths (`trl_variants.experimental.prompt_skipping.posterior`), without a model."""

import math

import numpy as np
import pytest
import torch

from trl_variants.experimental.prompt_skipping.posterior import PRIOR, PassRatePosterior, group_successes, half_life_decay, informative_probability, thompson_generate_probabilities
from trl_variants.dynamic_sampling.selection import informative_group_mask
from trl_variants.experimental.prompt_skipping.streak import pick_prompts

G = 4


def test_informative_probability_of_a_group():
    assert informative_probability(0.5, G) == pytest.approx(1 - 2 / 16)
    assert informative_probability(0.0, G) == 0.0 and informative_probability(1.0, G) == 0.0
    assert informative_probability(0.1, 16) == pytest.approx(1 - 0.1**16 - 0.9**16)


def test_group_successes_count_right_completions_for_any_reward_scale():
    scores = torch.tensor(
        [
            [1.0, 0.0, 1.0, 0.0],  # 1/0 reward, mixed
            [1.0, -1.0, -1.0, -1.0],  # +1/-1 reward, mixed
            [1.0, 1.0, 1.0, 1.0],  # all right
            [-1.0, -1.0, -1.0, -1.0],  # all wrong (+1/-1)
            [0.0, 0.0, 0.0, 0.0],  # all wrong (1/0)
            [0.2, 0.7, 0.7, 0.3],  # continuous scores, all positive but informative: still mixed
            [1.0, float("nan"), 0.0, float("nan")],  # two scored
        ]
    )
    right, scored = group_successes(scores, informative_group_mask(scores, 1e-6))
    assert right.tolist() == [2, 1, 4, 0, 0, 2, 1]
    assert scored.tolist() == [4, 4, 4, 4, 4, 4, 2]


def test_evidence_accumulates_and_fades_toward_the_prior():
    posterior = PassRatePosterior(3, decay_right=half_life_decay(40), decay_wrong=half_life_decay(10))
    posterior.record([0, 1, 1], right=[4, 0, 1], scored=[4, 4, 4], step=0)
    alpha, beta = posterior.parameters([0, 1, 2], step=0)
    assert alpha.tolist() == pytest.approx([PRIOR + 4, PRIOR + 1, PRIOR])
    assert beta.tolist() == pytest.approx([PRIOR, PRIOR + 7, PRIOR])
    # Ten steps later the wrong answers' evidence has halved, the right answers' has faded by 2 ** (-1/4).
    alpha, beta = posterior.parameters([1], step=10)
    assert alpha[0] == pytest.approx(PRIOR + 2 ** -0.25)
    assert beta[0] == pytest.approx(PRIOR + 3.5)
    # A later visit adds to the faded evidence; rows without a score or an index are left alone.
    posterior.record([1, 2, -1], right=[2, 0, 1], scored=[4, 0, 4], step=10)
    alpha, beta = posterior.parameters([1, 2], step=10)
    assert alpha.tolist() == pytest.approx([PRIOR + 2 ** -0.25 + 2, PRIOR])
    assert beta.tolist() == pytest.approx([PRIOR + 3.5 + 2, PRIOR])
    assert posterior.updated.tolist() == [0, 10, -1]
    # Evidence never visited again ends at the prior, without overflow, however long ago.
    alpha, beta = posterior.parameters([0], step=10**9)
    assert alpha[0] == pytest.approx(PRIOR, abs=1e-6) and beta[0] == pytest.approx(PRIOR, abs=1e-6)
    with pytest.raises(IndexError, match="row 5"):
        posterior.record([5], right=[1], scored=[4], step=11)


def test_memory_is_three_arrays_of_the_dataset_size_and_reloads():
    posterior = PassRatePosterior(1000, decay_right=1.0, decay_wrong=0.9)
    assert sum(array.nbytes for array in posterior.arrays().values()) == 12 * 1000
    posterior.record([3, 7], right=[1, 4], scored=[4, 4], step=2)
    restored = PassRatePosterior(1000, decay_right=1.0, decay_wrong=0.9)
    restored.load_arrays(posterior.arrays())
    for name, array in posterior.arrays().items():
        assert np.array_equal(restored.arrays()[name], array)
    with pytest.raises(ValueError, match="covers 1000 rows, this dataset has 999"):
        PassRatePosterior(999, decay_right=1.0, decay_wrong=0.9).load_arrays(posterior.arrays())


@pytest.mark.parametrize(("field", "value"), [("size", 0), ("decay_right", 0.0), ("decay_wrong", 1.5)])
def test_bad_posterior_settings_are_refused(field, value):
    kwargs = {"size": 4, "decay_right": 0.9, "decay_wrong": 0.9, field: value}
    with pytest.raises(ValueError, match=field):
        PassRatePosterior(**kwargs)
    with pytest.raises(ValueError, match="half_life_steps"):
        half_life_decay(0)


def test_generation_follows_the_posterior_and_never_reaches_zero():
    posterior = PassRatePosterior(4, decay_right=1.0, decay_wrong=1.0)
    # Row 0: always wrong over five visits; row 1: always right; row 2: mixed; row 3: never generated.
    for _ in range(5):
        posterior.record([0, 1, 2], right=[0, 4, 2], scored=[4, 4, 4], step=0)
    rng = np.random.default_rng(0)
    draws = np.stack([thompson_generate_probabilities(posterior, [0, 1, 2, 3, -1], 0, G, 0.01, rng)
                      for _ in range(2000)])  # fmt: skip
    generated = (draws == 1.0).mean(axis=0)
    assert generated[0] < 0.05 and generated[1] < 0.05
    assert generated[2] > 0.95
    assert generated[3] == 1.0 and generated[4] == 1.0
    # Skipped rows keep the floor: no prompt is ever written off.
    assert draws.min() == 0.01


def test_prompts_that_turn_from_always_wrong_to_mixed_are_trained_again():
    """30 prompts: 10 always right, 10 mixed, 10 always wrong until step 40 and mixed from then on, 8 prompts a
    step (3.75 steps an epoch), evidence of wrong answers halving every epoch. Before the turn the always-wrong ones
    are mostly skipped; after it every one of them is generated, found informative and so trained again, within
    eleven epochs (the evidence of ten always-wrong visits has faded by then)."""
    size, batch, turn, steps = 30, 8, 40, 80
    rng = np.random.default_rng(0)
    outcome_rng = np.random.default_rng(1)
    epoch = size / batch
    posterior = PassRatePosterior(size, decay_right=half_life_decay(8 * epoch), decay_wrong=half_life_decay(epoch))
    order = []

    def draw(count):
        while len(order) < count:
            order.extend(rng.permutation(size).tolist())
        return [order.pop(0) for _ in range(count)]

    def pass_probability(index, step):
        if index < 10:
            return 1.0
        if index < 20 or step >= turn:
            return 0.5
        return 0.0

    hard_generated_before, informative_after = 0, set()
    for step in range(steps):
        picked = pick_prompts(
            draw(batch), draw, batch,
            lambda indices: thompson_generate_probabilities(posterior, indices, step, G, 0.01, rng), rng,
        ).prompts  # fmt: skip
        outcomes = np.array([outcome_rng.random(G) < pass_probability(i, step) for i in picked])
        scores = torch.tensor(outcomes, dtype=torch.float64)
        informative = informative_group_mask(scores, 1e-6)
        posterior.record(picked, *group_successes(scores, informative), step=step)
        for index, useful in zip(picked, informative.tolist(), strict=True):
            if index >= 20:
                hard_generated_before += step < turn and 10 <= step
                if step >= turn and useful:
                    informative_after.add(index)
    # After the first few epochs, the always-wrong prompts take well under their 1/3 share of the generated slots.
    assert hard_generated_before < (turn - 10) * batch / 3 / 2
    assert informative_after == set(range(20, 30)), f"never trained again: {set(range(20, 30)) - informative_after}"


def test_draws_are_reproducible_from_the_generator_alone():
    """Every process holds the same posterior and seeds the same generator, so it takes the same decisions."""
    posterior = PassRatePosterior(10, decay_right=0.99, decay_wrong=0.9)
    posterior.record(list(range(10)), right=[0, 1, 2, 3, 4, 0, 4, 0, 4, 2], scored=[4] * 10, step=3)
    first = thompson_generate_probabilities(posterior, range(10), 5, G, 0.01, np.random.default_rng([7, 1]))
    second = thompson_generate_probabilities(posterior, range(10), 5, G, 0.01, np.random.default_rng([7, 1]))
    assert first.tolist() == second.tolist()
    assert not math.isnan(first.sum())
