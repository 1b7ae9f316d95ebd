"""The pure pieces of the variant comparison: t-intervals, steps to a target, degenerate-group counting, effects."""

import math

import pytest


@pytest.fixture
def stats():
    from benchmarks.shared import stats

    return stats


@pytest.fixture
def summary():
    from benchmarks.variants import variants_summary

    return variants_summary


@pytest.mark.parametrize("df, table_value", [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045)])
def test_t_quantile_matches_the_table(stats, df, table_value):
    assert stats.t_quantile(0.975, df) == pytest.approx(table_value, abs=1e-3)


def test_t_interval_by_hand(stats):
    interval = stats.t_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    half_width = 2.776 * math.sqrt(0.025) / math.sqrt(5)
    assert interval.mean == pytest.approx(0.3)
    assert (interval.low, interval.high) == pytest.approx((0.3 - half_width, 0.3 + half_width), abs=1e-3)
    assert interval.excludes_zero() and interval.n == 5


def test_t_interval_with_too_few_values(stats):
    assert math.isnan(stats.t_interval([]).mean)
    single = stats.t_interval([0.4, math.nan, None])
    assert single.mean == 0.4 and math.isnan(single.low) and not single.excludes_zero()
    assert stats.t_interval([-1.0, 1.0]).excludes_zero() is False


def test_first_reaching_returns_the_first_step_at_or_above_target(stats):
    assert stats.first_reaching([0, 10, 20, 30], [0.2, 0.39, 0.4, 0.1], 0.4) == 20
    assert stats.first_reaching([0, 100, 250], [0.2, 0.5, 0.6], 0.45) == 100
    assert stats.first_reaching([0, 10], [0.2, 0.3], 0.4) is None


def test_group_outcomes_count_all_right_and_all_wrong_groups(stats):
    prompts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    correct = [True] * 4 + [False] * 4 + [True, False, False, False]
    assert stats.count_group_outcomes(prompts, correct, 4) == stats.GroupOutcomes(groups=3, all_correct=1, all_wrong=1)


def test_group_outcomes_refuse_a_layout_that_is_not_grouped(stats):
    with pytest.raises(ValueError, match="do not share one prompt"):
        stats.count_group_outcomes(["a", "b", "a", "b"], [True] * 4, 2)
    with pytest.raises(ValueError, match="do not split into groups"):
        stats.count_group_outcomes(["a"] * 3, [True] * 3, 2)


def test_slope_and_binned_means(stats):
    assert stats.slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert math.isnan(stats.slope([1, 1], [0, 5]))
    assert stats.binned_means(range(10), list(range(10)), 10, 5) == [0.5, 2.5, 4.5, 6.5, 8.5]


def _run(seed, wrong_lengths, groups=4):
    steps = len(wrong_lengths)
    return {"seed": seed, "wrong_tokens": wrong_lengths, "wrong": [1] * steps, "all_correct": [0] * steps,
            "all_wrong": [1] * steps, "groups": [groups] * steps, "entropy": [1.0] * steps}


def test_change_over_training_and_paired_differences(summary):
    growing = [_run(seed, [2.0] * 5 + [2.0 + seed] * 5) for seed in range(3)]
    flat = [_run(seed, [2.0] * 10) for seed in range(3)]
    assert [summary.change_over_training(run, "wrong_length") for run in growing] == [0.0, 1.0, 2.0]
    assert summary.change_over_training(flat[0], "degenerate_share") == 0.0
    differences = summary.paired_effect_differences({"grpo": growing, "dr_grpo": flat})
    # Paired by seed: flat minus growing is -seed for seeds 0, 1, 2.
    assert differences["dr_grpo"]["wrong_length"].mean == pytest.approx(-1.0)
    assert not differences["dr_grpo"]["entropy"].excludes_zero()


def test_effect_statements_are_read_off_the_intervals(summary, stats):
    rising = stats.Interval(0.2, 0.1, 0.3, 5)
    summaries = {"grpo": {"effects": dict.fromkeys(summary.EFFECTS, rising)},
                 "dr_grpo": {"effects": dict.fromkeys(summary.EFFECTS, rising)}}
    differences = {"dr_grpo": dict.fromkeys(summary.EFFECTS, stats.Interval(-0.1, -0.3, 0.1, 5))}
    lines = summary.effect_statements(summaries, differences, {"grpo": "naive GRPO", "dr_grpo": "Dr.GRPO"})
    text = "\n".join(lines)
    assert "naive GRPO: change 0.200 [0.100, 0.300]: appears (interval excludes 0)" in text
    # Entropy collapse is a fall, so a rise of entropy is reported as the effect going the other way.
    assert "does not appear: it goes the other way" in text
    assert "Dr.GRPO: change 0.200 [0.100, 0.300]; difference from naive GRPO on the same seeds -0.100 " \
           "[-0.300, 0.100]: no change detected (interval includes 0)" in text
