"""The real-model study's pure pieces: the canonical form that deduplicates reorderings, the selection of distinct
problems, the task's problem space, the pilot's choice rule, the power calculation's formulas, and
what each arm sets."""

import math

import pytest



@pytest.fixture
def study():
    from benchmarks.real_model_study import pilot, power, power_formulas, task

    return task, pilot, power_formulas, power


def test_reorderings_share_a_canonical_form(study):
    task, *_ = study
    assert task.canonical_form("3 + 8") == task.canonical_form("8 + 3")
    assert task.canonical_form("7 - 3 + 2") == task.canonical_form("2 + 7 - 3") == task.canonical_form("7 + 2 - 3")
    assert task.canonical_form("4 * 9") == task.canonical_form("9 * 4")
    assert task.canonical_form("5 + 0") == task.canonical_form("5 - 0")  # one problem: a zero has no sign


def test_different_problems_keep_different_forms(study):
    task, *_ = study
    assert task.canonical_form("8 - 3") != task.canonical_form("3 - 8")
    assert task.canonical_form("7 - 3 + 2") != task.canonical_form("7 + 3 - 2")
    assert task.canonical_form("12 + 3") != task.canonical_form("1 + 23")


def test_canonical_form_refuses_what_has_no_order_free_form(study):
    task, *_ = study
    with pytest.raises(ValueError, match=r"'4 \+ 0 \* 0' mixes"):
        task.canonical_form("4 + 0 * 0")
    with pytest.raises(ValueError, match="not numbers joined"):
        task.canonical_form("(3 + 4)")


def test_select_distinct_keeps_first_occurrences_and_skips_excluded(study):
    task, *_ = study
    keys = ["a", "b", "a", "c", "d", "b", "e"]
    assert task.select_distinct(keys, 3) == [0, 1, 3]
    assert task.select_distinct(keys, 3, exclude=["b"]) == [0, 3, 4]
    assert task.select_distinct(keys, 10) == [0, 1, 3, 4, 6]
    with pytest.raises(ValueError, match="limit=-1"):
        task.select_distinct(keys, -1)


def test_space_size_counts_the_old_task_by_hand(study):
    task, *_ = study
    old = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
    # Operands 0..10: 11 * 11 * 2 questions. Forms: the unordered pairs of a + b, the ordered pairs of a - b, less
    # the 11 a - 0 that are a + 0.
    assert task.space_size(old) == (242, 11 * 12 // 2 + 11 * 11 - 11)
    assert task.space_size({**old, "min_terms": 1, "max_terms": 1}) == (11, 11)


def test_pilot_rule_names_every_failure_and_chooses_the_most_mixed(study):
    _, pilot, *_ = study
    good = {"name": "good", "pass_rate": 0.25, "mixed_share": 0.7, "format_rate": 0.95, "canonical_forms": 2000}
    assert pilot.qualifies(good) == []
    bad = {"name": "bad", "pass_rate": 0.6, "mixed_share": 0.3, "format_rate": 0.5, "canonical_forms": 100}
    assert len(pilot.qualifies(bad)) == 4
    other = {**good, "name": "other", "mixed_share": 0.8, "pass_rate": 0.35}
    rows = [{**row, "fails": pilot.qualifies(row)} for row in (good, bad, other)]
    assert pilot.choose(rows) == "other"
    assert pilot.choose([rows[1]]) is None


def test_spread_of_per_prompt_counts(study):
    _, pilot, *_ = study
    result = pilot.spread([0, 8, 4, 4], 8)
    assert result["histogram"] == [1, 0, 0, 0, 2, 0, 0, 0, 1]
    assert result["mixed_share"] == 0.5
    assert result["informative_group_probability"] == pytest.approx(0.5 * (1 - 2 * 0.5**8))


def test_evaluation_noise_by_hand(study):
    _, _, power, _ = study
    assert power.evaluation_variance(0.2, 300, 2) == pytest.approx(0.2 / 600)
    # c passes of k = 4: c (k - c) / 12 per prompt.
    assert power.q_from_per_prompt([0, 4, 2, 1], 4) == pytest.approx((0 + 0 + 4 / 12 + 3 / 12) / 4)
    # Mixed prompts with equal passes: the counts-only estimate is the per-prompt one.
    assert power.q_from_counts(accuracy=(4 + 2 + 2) / 16, always_right=1, always_wrong=1, prompts=4,
                               samples=4) == pytest.approx(power.q_from_per_prompt([4, 0, 2, 2], 4))
    with pytest.raises(ValueError, match="prompts=0"):
        power.evaluation_variance(0.2, 0, 2)


def test_noninferiority_power_agrees_with_the_normal_limit(study):
    _, _, power, _ = study
    seeds, sd = 2000, 1.0
    margin = (1.959964 + 0.841621) * sd / math.sqrt(seeds)
    assert power.noninferiority_power(margin, sd, seeds) == pytest.approx(0.8, abs=0.005)
    assert power.smallest_margin(sd, seeds) == pytest.approx(margin, rel=0.01)


def test_power_grows_with_seeds_and_inverts(study):
    _, _, power, _ = study
    powers = [power.noninferiority_power(0.03, 0.03, seeds) for seeds in (3, 5, 10, 20)]
    assert powers == sorted(powers) and powers[-1] > 0.8 > powers[0]
    needed = power.seeds_needed(0.03, 0.03)
    assert power.noninferiority_power(0.03, 0.03, needed) >= 0.8 > power.noninferiority_power(0.03, 0.03, needed - 1)
    margin = power.smallest_margin(0.03, 8)
    assert power.noninferiority_power(margin, 0.03, 8) == pytest.approx(0.8, abs=1e-6)


def test_detection_power_is_the_test_size_at_no_difference(study):
    _, _, power, _ = study
    assert power.detection_power(0.0, 0.05, 6) == pytest.approx(0.05, abs=1e-6)
    effect = power.smallest_detectable(0.05, 6)
    assert power.detection_power(effect, 0.05, 6) == pytest.approx(0.8, abs=1e-6)


def test_study_spread_and_grid_cost_by_hand(study):
    _, _, power, _ = study
    assert power.study_sd(0.0004, 0.2, 300, 2, evaluations=4) == pytest.approx(math.sqrt(0.0004 + 2 * 0.2 / 600 / 4))
    assert power.study_sd(-1.0, 0.2, 300, 2) == pytest.approx(math.sqrt(2 * 0.2 / 600))  # negative part: none
    # Step-0 evaluation once, then per seed: 2 arms x (10 steps and 2 evaluations).
    assert power.grid_cpu_seconds(3, {"x": 5.0, "y": 7.0}, 10, 2, 100.0) == 100 + 3 * (50 + 200 + 70 + 200)


def test_fixed_margin_rounds_up_to_the_step(study):
    *_, power = study
    assert power.fixed_margin(0.0312) == 0.035
    assert power.fixed_margin(0.035) == 0.035
    assert power.fixed_margin(0.0401) == 0.045


def test_choose_design_takes_the_smallest_margin_among_eligible(study):
    *_, power = study

    def row(prompts, seeds, margin, seconds):
        return {"prompts": prompts, "seeds": seeds, "evaluation_cpu_seconds": seconds,
                "planning": {"margin_a": margin}}

    rows = [row(200, 9, 0.02, 1), row(300, 4, 0.025, 1), row(300, 6, 0.04, 5), row(600, 6, 0.04, 2),
            row(400, 5, 0.05, 1)]
    assert power.choose_design(rows) is rows[3]
    with pytest.raises(ValueError, match="no design affords 5 seeds"):
        power.choose_design(rows[:2])


def test_each_arm_names_its_sampling_options_so_a_change_of_defaults_cannot_change_an_arm(tmp_path):
    from trl import GRPOTrainer

    from benchmarks.real_model_study.study import arm_trainer_and_config
    from trl_variants import DAPOTrainer

    shared = {"per_device_train_batch_size": 16, "num_generations": 8, "use_cpu": True, "report_to": []}
    expected = {"dapo": (False, False), "defaults": (True, True), "carry_only": (False, True)}
    for arm, (skip, carry) in expected.items():
        trainer_class, config = arm_trainer_and_config(arm, str(tmp_path), shared)
        assert trainer_class is DAPOTrainer
        assert (config.skip_degenerate_prompts, config.dynamic_sampling_carry_surplus) == (skip, carry), arm
    assert arm_trainer_and_config("grpo", str(tmp_path), shared)[0] is GRPOTrainer
    with pytest.raises(ValueError, match="--arm 'naive' is not an arm of the study"):
        arm_trainer_and_config("naive", str(tmp_path), shared)
