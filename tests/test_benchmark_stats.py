"""The benchmarks' shared statistics: t-intervals and degenerate-group counting."""

import math

import pytest


@pytest.fixture
def stats():
    from benchmarks.shared import stats

    return stats


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


def test_group_outcomes_count_all_right_and_all_wrong_groups(stats):
    prompts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    correct = [True] * 4 + [False] * 4 + [True, False, False, False]
    assert stats.count_group_outcomes(prompts, correct, 4) == stats.GroupOutcomes(groups=3, all_correct=1, all_wrong=1)


def test_group_outcomes_count_runs_of_one_prompt_and_what_forms_no_group(stats):
    # The allocation mode's rounds: a fresh prompt's 4 completions after two continuations of 2, then one of "a"
    # again beside a whole group of it (a run of 6: no group), then two whole groups of "d" in a row.
    prompts = ["a", "a", "b", "b"] + ["c"] * 4 + ["a"] * 6 + ["d"] * 8
    correct = [True, False, True, True] + [True] * 4 + [False] * 6 + [False] * 4 + [True, False, False, False]
    assert stats.group_spans(prompts, 4) == ([(4, 8), (14, 18), (18, 22)], 10)
    assert stats.count_group_outcomes(prompts, correct, 4) == stats.GroupOutcomes(groups=3, all_correct=1,
                                                                                  all_wrong=1, ungrouped=10)
    assert stats.group_spans([["m"], ["m"], ["n"], ["n"]], 2) == ([(0, 2), (2, 4)], 0)  # messages compared as text
    with pytest.raises(ValueError, match="count_group_outcomes: 3 prompts for 2 completions"):
        stats.count_group_outcomes(["a"] * 3, [True] * 2, 2)
