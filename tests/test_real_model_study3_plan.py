"""Study 3's plan: the training part of study 2's spread, a seed's cost and the choice of design, by hand."""

import pytest

from benchmarks.real_model_study3 import plan


def test_training_part_removes_twice_the_evaluation_variance_over_the_evaluations_averaged():
    # q = 0.12 on 300 x 1: evaluation variance 4e-4; twice, over 4 evaluations: 2e-4.
    assert plan.training_variance(0.03, 0.12, 300, 4) == pytest.approx(0.03**2 - 2e-4)
    assert plan.training_variance(0.01, 0.12, 300, 1) == 0.0  # never below 0


def test_a_seed_costs_its_arms_training_to_the_last_budget_and_two_evaluations_per_point():
    per_token = {"grpo": 0.1, "dapo": 0.05, "defaults": 0.05}
    # (0.2 s per token x 1,000 tokens) x 1.2, plus 3 points x 3 arms x 2 evaluations x 10 s.
    assert plan.seed_cpu_seconds(per_token, 1_000, 3, 10.0) == pytest.approx(0.2 * 1_000 * 1.2 + 180)


def row(last_budget, margin, hours_for_wanted, sd=0.04):
    return {"last_budget": last_budget, "budgets": 2, "cpu_hours_per_seed": 1.5, "seeds": 9, "sd_planning": sd,
            "sd_conservative": 0.057, "margin_planning": margin, "margin_conservative": 0.06,
            f"seeds_for_{plan.WANTED_MARGIN}_planning": 10, f"cpu_hours_for_{plan.WANTED_MARGIN}_planning":
            hours_for_wanted}


def test_choose_takes_the_cheapest_design_reaching_the_wanted_margin_within_about_the_budget():
    chosen = plan.choose([row(8_000, 0.043, 15.6), row(12_000, 0.050, 19.0)], budget_hours=15)
    assert (chosen["last_budget"], chosen["seeds"], chosen["cpu_hours"]) == (8_000, 10, 15.6)
    assert chosen["margin_planning"] == pytest.approx(plan.power_formulas.smallest_margin(0.04, 10))


def test_choose_falls_back_to_the_smallest_margin_the_budget_affords():
    chosen = plan.choose([row(8_000, 0.047, 18.0), row(12_000, 0.047, 20.0), row(16_000, 0.052, 30.0)],
                         budget_hours=15)
    assert chosen["last_budget"] == 12_000 and chosen["seeds"] == 9  # a tie goes to the longer run
