"""The GPU-speed study's cost model (benchmarks/gpu_speed/cost_model.py): pure functions, checked without a model."""

import pytest

from benchmarks.gpu_speed.cost_model import (
    H200_360M,
    GenerateCurve,
    StudyShape,
    first_round_groups,
    first_round_saving,
    linear_curve,
    predict,
)
from trl_variants.dynamic_sampling.selection import groups_to_request

STEPS = 400


def test_a_curve_interpolates_between_its_points_and_extends_its_end_segments():
    assert H200_360M.call_seconds(128) == 18.6 and H200_360M.call_seconds(768) == 27.7
    assert H200_360M.call_seconds(256) == pytest.approx((18.6 + 20.1) / 2)
    assert H200_360M.call_seconds(1152) == pytest.approx(27.7 + (27.7 - 20.1))
    assert H200_360M.call_seconds(0) == pytest.approx(18.6 - 1.5 / 2)
    assert linear_curve(128, 12.8).call_seconds(64) == pytest.approx(6.4)
    with pytest.raises(ValueError, match="at least two increasing counts"):
        GenerateCurve((128, 128), (1.0, 2.0))
    with pytest.raises(ValueError, match="must be positive"):
        GenerateCurve((128, 256), (1.0, 0.0))


def test_grpo_makes_one_call_of_its_generation_batch_and_trains_the_expected_informative_share():
    shape = StudyShape(batch_groups=16, group_size=8, informative_share=0.5, other_s_per_step=2.0)
    grpo = predict("grpo", H200_360M, shape)
    assert (grpo.calls_per_step, grpo.rows_per_step, grpo.s_per_step) == (1, 128, pytest.approx(20.6))
    assert grpo.informative_rows_per_step == 64


def test_dynamic_sampling_fills_its_batch_and_pays_per_call_or_per_row_as_the_curve_says():
    shape = StudyShape(batch_groups=16, group_size=8, informative_share=0.5)
    flat, linear = H200_360M, linear_curve(128, 18.6)
    for arm in ("dapo_as_published", "dapo_defaults"):
        on_flat, on_linear = predict(arm, flat, shape, STEPS), predict(arm, linear, shape, STEPS)
        assert on_flat.informative_rows_per_step == pytest.approx(128, rel=0.01)
        # The same simulated rounds on both curves (same seed): one call per round, whatever its rows.
        assert (on_flat.calls_per_step, on_flat.rows_per_step) == (on_linear.calls_per_step, on_linear.rows_per_step)
        assert 1 <= on_flat.calls_per_step < 2 and on_flat.rows_per_step > 128
        # Linear: a step costs its rows; flat: barely more than one call.
        assert on_linear.s_per_step == pytest.approx(on_linear.rows_per_step / 128 * 18.6, rel=1e-9)
        assert on_flat.s_per_step < 1.4 * 18.6
    # Carrying needs fewer rows for the same informative rows.
    assert predict("dapo_defaults", flat, shape, STEPS).rows_per_step < predict("dapo_as_published", flat, shape, STEPS).rows_per_step
    # A cap of one generation batch per call: as many calls as generation batches in the rounds.
    capped = predict("dapo_as_published", linear, StudyShape(16, 8, 0.5, max_rows_per_call=128), STEPS)
    assert capped.calls_per_step > 2


def test_the_first_round_is_the_packages_sizing_unless_a_margin_is_given():
    shape = StudyShape(batch_groups=16, group_size=8)
    assert first_round_groups(shape, 0, None, None) == 16
    assert first_round_groups(shape, 0, 0.5, None) == groups_to_request(16, 0.5, 16, 1)
    assert first_round_groups(shape, 10, 0.5, 2.0) == 24  # the 6 groups still needed, at twice the expected cost
    assert first_round_groups(shape, 16, 0.5, 2.0) == 16


def test_a_larger_first_round_cannot_pay_where_a_call_costs_its_rows():
    shape = StudyShape(batch_groups=16, group_size=8, informative_share=0.5)
    margin, saving, break_even = first_round_saving("dapo_as_published", linear_curve(128, 18.6), shape, STEPS)
    assert (margin, saving, break_even) == (1.2, 0.0, 0.0)


def test_on_a_flat_curve_a_larger_first_round_saves_less_of_a_longer_step():
    shape = StudyShape(batch_groups=16, group_size=8, informative_share=0.5)
    flat = GenerateCurve((128, 1024), (10.0, 10.5))  # a call costs the same whatever its rows
    margin, saving, break_even = first_round_saving("dapo_defaults", flat, shape, STEPS)
    assert margin > 1.2 and saving > 0.05 and break_even > 0
    # The same seconds saved, out of a step longer by `break_even`: exactly the decisive share.
    longer = StudyShape(batch_groups=16, group_size=8, informative_share=0.5, other_s_per_step=break_even)
    assert first_round_saving("dapo_defaults", flat, longer, STEPS)[1] == pytest.approx(0.10)
    with pytest.raises(ValueError, match="arm 'ppo' is not one of"):
        predict("ppo", H200_360M, shape)
