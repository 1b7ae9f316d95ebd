"""The study report's "Limits found after the runs" on hand-made records, each figure checked by hand."""

import math
import statistics

import pytest


@pytest.fixture
def limits():
    from benchmarks.real_model_study import study_limits

    return study_limits


def record(arm, seed, accuracy, questions=("q1", "q2"), per_prompt=None, truncated=None, tokens=(0, 100, 200, 300, 400),
           equal_groups=0):
    steps = [0, 5, 10, 15, 20]
    return {"arm": arm, "seed": seed, "complete": True, "eval_steps": steps, "accuracy": list(accuracy),
            "eval_tokens": list(tokens), "train_questions": list(questions),
            "eval_per_prompt": per_prompt or [[seed, index, arm] for index in range(5)],
            "eval_truncated": truncated or [0.02] * 5, "settings": {"num_generations": 8},
            "probe": {str(step): {"groups": 2, "equal_score_groups": equal_groups} for step in range(20)}}


def test_shared_training_problems_counts_the_pool_and_the_largest_overlap(limits):
    # reasoning-gym's offset: seed s trains on seed 0's problems s, s + 1, s + 2.
    pool = [f"problem {i}" for i in range(10)]
    runs = {"grpo": {seed: record("grpo", seed, [0.2] * 5, questions=pool[seed:seed + 3]) for seed in range(4)}}
    assert limits.shared_training_problems(runs) == {"seeds": 4, "distinct": 6, "per_seed": 3, "most_shared": 2}
    runs["grpo"][0].pop("train_questions")
    assert limits.shared_training_problems(runs) is None


def test_identical_evaluations_are_found_only_where_every_arm_agrees_on_every_problem(limits):
    same = [[0, 1, 0]] * 5
    runs = {arm: {0: record(arm, 0, [0.2] * 5, per_prompt=same),
                  1: record(arm, 1, [0.2] * 5)} for arm in ("grpo", "dapo")}
    # Seed 1's results name their arm, so they differ; seed 0's agree at every step after step 0.
    assert limits.identical_evaluations(runs) == [(0, 5), (0, 10), (0, 15), (0, 20)]
    assert limits.no_equal_groups_before(runs["grpo"][0], 5)
    assert not limits.no_equal_groups_before(record("dapo", 0, [0.2] * 5, equal_groups=1), 5)


def test_realised_power_uses_the_spread_of_the_per_seed_differences(limits):
    from benchmarks.real_model_study import power_formulas

    later = [0.01, -0.03, 0.02, 0.0]  # defaults - dapo per seed, constant over the later evaluations
    runs = {"dapo": {seed: record("dapo", seed, [0.2] + [0.5] * 4) for seed in range(4)},
            "defaults": {seed: record("defaults", seed, [0.2] + [0.5 + later[seed]] * 4) for seed in range(4)}}
    plan = {"margin": 0.035, "sd_a": 0.03, "sd_b": 0.03, "sd_b_tokens": 0.03, "detect_b": 0.03,
            "detect_b_tokens": 0.03}
    [row] = limits.realised_power(runs, plan)  # only (a) has both arms
    sd = statistics.stdev(later)
    assert row["sd"] == pytest.approx(sd) and row["seeds"] == 4
    assert row["threshold"] == pytest.approx(power_formulas.smallest_margin(sd, 4))
    assert row["power"] == pytest.approx(power_formulas.noninferiority_power(0.035, sd, 4))
    # No spread at all: no row, rather than a power of 1 from a zero SD.
    flat = {arm: {seed: record(arm, seed, [0.2] + [0.5] * 4) for seed in range(4)} for arm in ("dapo", "defaults")}
    assert limits.realised_power(flat, plan) == []


def test_truncation_reports_the_evaluations_above_the_threshold_and_the_largest_other(limits):
    runs = {"carry_only": {2: record("carry_only", 2, [0.2] * 5, truncated=[0.02, 0.0, 0.01, 0.037, 0.503])},
            "dapo": {2: record("dapo", 2, [0.2] * 5, truncated=[0.02, 0.01, 0.0, 0.0, 0.0])}}
    above, rest = limits.truncation(runs)
    assert above == [("carry_only", 2, 20, 0.503)]
    assert rest == pytest.approx(0.037)  # step 0's 0.02 is the shared evaluation, not counted
    assert math.isnan(limits.truncation({})[1])


def test_interpolation_brackets_name_the_evaluations_the_budget_fell_between(limits):
    runs = {"grpo": {0: record("grpo", 0, [0.2] * 5, tokens=(0, 60, 120, 180, 240))},
            "dapo": {0: record("dapo", 0, [0.2] * 5, tokens=(0, 200, 400, 600, 800))}}
    assert limits.interpolation_brackets(runs) == (240, {"dapo": {(5, 10)}, "grpo": {(15, 20)}})


def test_the_limits_section_is_left_out_where_the_records_hold_nothing_it_needs(limits):
    assert limits.limits_section({}) is None
