import math

import pytest
import torch

from trl_variants.dynamic_sampling.selection import MAX_ROUND_SIZE_FACTOR, REFILL_MARGIN, PassRateTracker, all_correct_groups, decide_round, degenerate_outcomes, first_round_extra_groups, groups_to_request, informative_group_mask
from trl_variants.dynamic_sampling.prompt_sources import RefillSampler


def test_float_noise_counts_as_degenerate():
    scores = torch.tensor([[1.0, 0.99999994, 1.0], [1.0, -1.0, 1.0], [-1.0, -1.0, -1.0]])
    assert informative_group_mask(scores, tolerance=1e-6).tolist() == [False, True, False]


def test_tolerance_is_inclusive_and_nan_is_ignored():
    nan = float("nan")
    scores = torch.tensor([[0.0, 0.5], [nan, 1.0], [nan, nan], [0.0, nan, ][:2], [1.0, 0.0]])
    assert informative_group_mask(scores, tolerance=0.5).tolist() == [False, False, False, False, True]


def test_a_group_is_all_correct_when_the_mean_of_its_scored_completions_is_above_zero():
    nan = float("nan")
    scores = torch.tensor([[1.0, 1.0], [0.0, 0.0], [-1.0, -1.0], [nan, 1.0], [nan, nan], [1e-9, 1e-9], [-1e-9, nan]])
    assert all_correct_groups(scores).tolist() == [True, False, False, True, False, True, False]
    # Informative groups too go by their mean, though no caller reads the rule for them.
    assert all_correct_groups(torch.tensor([[1.0, -0.5], [0.5, -1.0]], dtype=torch.float64)).tolist() == [True, False]


def test_degenerate_outcomes_split_by_sign():
    scores = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0], [1.0, -1.0]])
    informative = informative_group_mask(scores, 1e-6)
    assert degenerate_outcomes(scores, informative) == (1, 2)


def test_groups_to_request_uses_pass_rate_margin_and_cap():
    assert groups_to_request(0, 0.5, 8, 1) == 0
    assert groups_to_request(4, None, 8, 1) == 4
    assert groups_to_request(4, 0.5, 8, 1) == math.ceil(4 / 0.5 * REFILL_MARGIN)
    assert groups_to_request(4, 0.0, 8, 1) == MAX_ROUND_SIZE_FACTOR * 8
    assert groups_to_request(8, 0.01, 8, 1) == MAX_ROUND_SIZE_FACTOR * 8
    assert groups_to_request(3, 0.5, 8, 4) % 4 == 0


def test_first_round_extra_groups_from_history():
    assert first_round_extra_groups(8, 0, None, 1) == 0
    assert first_round_extra_groups(8, 0, 1.0, 1) == 0
    assert first_round_extra_groups(8, 0, 0.5, 1) == math.ceil(8 / 0.5 * REFILL_MARGIN) - 8
    assert first_round_extra_groups(8, 0, 0.5, 3) % 3 == 0


def test_the_decision_drops_surplus_and_fills_only_when_asked():
    flags = [False, True, True, False, True]
    assert decide_round(flags, 2, fill=True, carry_capacity=0).trained == [1, 2]
    short = decide_round(flags, 4, fill=True, carry_capacity=0)
    assert short.kept == [1, 2, 4] and short.filled == [0] and not short.short
    refused = decide_round(flags, 4, fill=False, carry_capacity=0)
    assert refused.trained == [1, 2, 4] and refused.short


def test_pass_rate_tracker_smooths():
    tracker = PassRateTracker(smoothing=0.5)
    tracker.update(0, 0)
    assert tracker.estimate is None
    tracker.update(2, 4)
    tracker.update(4, 4)
    assert tracker.estimate == pytest.approx(0.75)


def test_refill_sampler_covers_each_epoch_and_resumes():
    sampler = RefillSampler(dataset_size=7, seed=3)
    first = sampler.draw(7)
    assert sorted(first) == list(range(7))
    sampler.draw(3)
    state = sampler.state_dict()
    expected = sampler.draw(9)
    resumed = RefillSampler(dataset_size=7, seed=0)
    resumed.load_state_dict(state)
    assert resumed.draw(9) == expected
    with pytest.raises(ValueError, match="dataset"):
        RefillSampler(dataset_size=5, seed=0).load_state_dict(state)
