"""Study 3's equal-token evaluation trigger: which budgets an arm is evaluated at, on which weights, and when a run
is complete."""

import pytest

from benchmarks.real_model_study3.budgets import budgets_due, check_budgets, run_complete

BUDGETS = (4_000, 8_000)


def test_a_budget_is_due_once_the_generated_tokens_pass_it_and_not_before():
    assert budgets_due(BUDGETS, 0, tokens_at_boundary=3_500, tokens_generated=4_000) == []  # reached, not passed
    assert budgets_due(BUDGETS, 0, tokens_at_boundary=3_500, tokens_generated=4_001) == [4_000]
    assert budgets_due(BUDGETS, 1, tokens_at_boundary=4_600, tokens_generated=7_900) == []


def test_one_batch_passing_two_budgets_evaluates_both_on_the_same_weights():
    # A dynamic-sampling batch of many rounds can pass both budgets; both are read on the weights at 3,900 tokens.
    assert budgets_due(BUDGETS, 0, tokens_at_boundary=3_900, tokens_generated=8_100) == [4_000, 8_000]


def test_a_budget_passed_in_an_earlier_batch_and_never_evaluated_is_an_error():
    with pytest.raises(ValueError, match=r"budgets \[4000\] were passed before the boundary at 4200 tokens"):
        budgets_due(BUDGETS, 0, tokens_at_boundary=4_200, tokens_generated=5_000)


@pytest.mark.parametrize("budgets", [(), (0, 10), (10, 5), (5, 5), (4_000.0,)])
def test_budgets_must_be_strictly_increasing_positive_integers(budgets):
    with pytest.raises(ValueError, match="strictly increasing positive integers"):
        check_budgets(budgets)


def test_counts_must_be_ordered():
    with pytest.raises(ValueError, match="tokens_at_boundary=10, tokens_generated=5"):
        budgets_due(BUDGETS, 0, tokens_at_boundary=10, tokens_generated=5)


def test_a_run_is_complete_with_every_budget_evaluated_and_the_fixed_step_reached():
    assert run_complete(BUDGETS, 2, step=12, fixed_step=12)
    assert not run_complete(BUDGETS, 2, step=11, fixed_step=12)  # a fast-generating arm trains on to step 12
    assert not run_complete(BUDGETS, 1, step=30, fixed_step=12)
