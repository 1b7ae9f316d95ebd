"""The real-model study harness without a model: budgets read on both sides and interpolated in tokens, the
recorder driven as the trainer drives it, the problem split, the paired analysis and its power, and the report."""

import json
import math
import re
import types

import pytest

from benchmarks.shared.outcome_probe import OutcomeProbe
from benchmarks.shared.stats import t_interval
from benchmarks.study_harness import analysis, budgets, problems, recorder
from benchmarks.study_harness.study import Settings
from trl_variants.rewards.pass_rate import PassRate

# Budgets and interpolation.


def test_budgets_must_be_strictly_increasing_positive_integers():
    assert budgets.check_budgets([10, 20]) == (10, 20)
    for bad in ([], [0], [20, 10], [10, 10], [1.5]):
        with pytest.raises(ValueError, match="strictly increasing positive integers"):
            budgets.check_budgets(bad)


def test_a_budget_is_read_below_when_passed_and_above_at_the_next_boundary():
    # The batch generated at the boundary with 40 tokens passes 50: read below now, on the boundary's weights.
    assert budgets.readings_due((50, 100), {}, 40, 80) == [(50, "below")]
    # The next boundary (80 tokens) is above 50: read above there.
    assert budgets.readings_due((50, 100), {50: {"below": 40}}, 80, 90) == [(50, "above")]
    # One batch passing two budgets: both read below at its boundary, both above at the next.
    assert budgets.readings_due((50, 60), {}, 40, 70) == [(50, "below"), (60, "below")]
    assert budgets.readings_due((50, 60), {50: {"below": 40}, 60: {"below": 40}}, 70, 70) == [
        (50, "above"), (60, "above")]
    # A reading below exactly at the budget needs none above.
    assert budgets.readings_due((50,), {50: {"below": 50}}, 90, 95) == []
    assert not budgets.needs_above(50, 50) and budgets.needs_above(50, 49)


def test_a_budget_passed_without_its_reading_below_is_an_error():
    with pytest.raises(ValueError, match="budget 50 was passed before the boundary at 60 tokens"):
        budgets.readings_due((50,), {}, 60, 70)
    with pytest.raises(ValueError, match="tokens_at_boundary=80, tokens_generated=70"):
        budgets.readings_due((50,), {}, 80, 70)


def test_every_budget_read_on_both_sides_or_exactly():
    read = [{"budget": 50, "side": "below", "tokens": 40}]
    assert not budgets.budgets_read((50,), read)
    assert budgets.budgets_read((50,), [*read, {"budget": 50, "side": "above", "tokens": 80}])
    assert budgets.budgets_read((50,), [{"budget": 50, "side": "below", "tokens": 50}])


def test_interpolation_is_linear_in_tokens_between_the_two_readings():
    assert budgets.interpolate(50, (40, 0.2), (80, 0.6)) == pytest.approx(0.3)
    assert budgets.interpolate(50, (50, 0.2), None) == 0.2
    with pytest.raises(ValueError, match="expected below <= budget < above"):
        budgets.interpolate(50, (40, 0.2), None)
    with pytest.raises(ValueError, match="expected below <= budget < above"):
        budgets.interpolate(50, (40, 0.2), (45, 0.6))


def test_each_evaluation_point_has_its_own_generator_seed():
    assert [budgets.point_seed((4_000, 8_000), "step0"), budgets.point_seed((4_000, 8_000), "budget", 0),
            budgets.point_seed((4_000, 8_000), "budget", 1), budgets.point_seed((4_000, 8_000), "fixed_step")] == [
        10_000, 10_001, 10_002, 10_003]
    with pytest.raises(ValueError, match="budget_index=2"):
        budgets.point_seed((4_000, 8_000), "budget", 2)
    with pytest.raises(ValueError, match="kind='step 12'"):
        budgets.point_seed((4_000,), "step 12")


# The recorder, driven as the trainer drives it.


def pass_rate(seed: int, greedy: bool) -> PassRate:
    return PassRate(pass_rate=seed / 100_000, mean_score=0.0, prompts=2, samples_per_prompt=1, per_prompt=[0, 1],
                    always_right=1, always_wrong=1, mean_completion_tokens=5.0, truncated_fraction=0.0,
                    greedy=greedy, seconds=0.0)


class Run:
    """A BudgetRecorder driven as the trainer drives it: generation rounds (each a reward call), then steps."""

    def __init__(self, tmp_path, settings):
        self.calls = []

        def evaluate(model, seed, greedy):
            self.calls.append((seed, greedy))
            return pass_rate(seed, greedy)

        def reward(prompts, completions, completion_ids, trainer_state=None, **kwargs):
            return [1.0 if index % 2 else 0.0 for index, _ in enumerate(completions)]

        self.probe = OutcomeProbe(reward, 2, passed=lambda value: value >= 1.0, group_key="reasoning_gym_index")
        self.path = tmp_path / "run.json"
        self.recorder = recorder.BudgetRecorder(str(self.path), {"arm": "grpo"}, {"commit": "x"}, self.probe,
                                                settings, ("clip_ratio/high_mean",), evaluate)
        self.reward = self.recorder.wrap_reward(self.probe.reward_func)
        self.state = types.SimpleNamespace(global_step=0)
        self.control = types.SimpleNamespace(should_training_stop=False)
        self.recorder.on_train_begin(None, self.state, self.control, model="model")

    def generate(self, tokens_each: int, completions: int = 4, problem: int = 7):
        ids = [[0] * tokens_each] * completions
        self.reward(prompts=["p"] * completions, completions=["c"] * completions, completion_ids=ids,
                    trainer_state=self.state, reasoning_gym_index=[problem] * completions)

    def steps(self, count: int, high: float = 0.1):
        for _ in range(count):
            self.recorder.on_step_begin(None, self.state, self.control)
            self.state.global_step += 1
            self.recorder.on_step_end(None, self.state, self.control)
            self.recorder.on_log(None, self.state, self.control, logs={"clip_ratio/high_mean": high, "loss": 1.0})

    def points(self):
        return [(p["kind"], p.get("budget"), p.get("side"), p["step"], p["tokens"])
                for p in self.recorder.record["evaluations"]]


def test_a_budget_is_read_on_the_boundaries_on_both_sides_of_it(tmp_path):
    run = Run(tmp_path, Settings(token_budgets=(50,), fixed_step=4, steps_per_generation=2))
    run.generate(10)  # 40 tokens by the batch at boundary 0
    run.steps(2)
    run.generate(10)  # 80: passes 50 while the weights are still step 2's (40 tokens): read below
    assert run.points() == [("budget", 50, "below", 2, 40)]
    assert run.calls == [(10_001, True), (10_001, False)]
    run.steps(2)  # step 4: the fixed step
    assert run.points()[-1] == ("fixed_step", None, None, 4, 80) and not run.control.should_training_stop
    with pytest.raises(recorder.RunComplete):
        run.generate(10)  # the next batch, on step 4's weights (80 tokens): read above; the greedy result is reused
    assert run.points()[-1] == ("budget", 50, "above", 4, 80)
    assert run.calls[2:] == [(10_002, True), (10_002, False), (10_001, False)]
    record = run.recorder.finish()
    assert record["complete"] and record["max_visits"] == 6  # 3 batches x 4 completions / 2 per group of problem 7
    assert json.loads(run.path.read_text())["logged"]["clip_ratio/high_mean"] == {str(s): 0.1 for s in range(1, 5)}
    assert record["attempts"] == [{"commit": "x"}]
    # Greedy below 0.10001 (seed 10,001) at 40 tokens, above 0.10002 (step 4's, reused) at 80: a quarter of the way.
    assert analysis.at_budget(50)(record) == pytest.approx(0.10001 + 0.00001 * 0.25)


def test_a_run_whose_boundary_lands_on_the_budget_needs_no_reading_above(tmp_path):
    run = Run(tmp_path, Settings(token_budgets=(40,), fixed_step=2, steps_per_generation=2))
    run.generate(10)  # exactly 40
    run.steps(2)
    with pytest.raises(recorder.RunComplete):
        run.generate(10)
    assert run.points() == [("fixed_step", None, None, 2, 40), ("budget", 40, "below", 2, 40)]


def test_a_record_cut_to_a_checkpoint_keeps_what_the_checkpoint_knew():
    record = {"complete": False, "step_cpu_seconds": [1.0] * 9, "step_seconds": [2.0] * 9,
              "evaluations": [{"kind": "budget", "step": 4}, {"kind": "fixed_step", "step": 8},
                              {"kind": "budget", "step": 8}],
              "probe": {"0": {}, "4": {}, "8": {}}, "logged": {"k": {"4": 1, "8": 2, "9": 3}}}
    cut = recorder.truncate_to_checkpoint(record, 8)
    # The fixed step 8 ran before checkpoint 8 was written; the reading at boundary 8 came after it.
    assert cut["evaluations"] == record["evaluations"][:2]
    assert cut["probe"] == {"0": {}, "4": {}} and cut["logged"] == {"k": {"4": 1, "8": 2}}
    assert len(cut["step_cpu_seconds"]) == len(cut["step_seconds"]) == 8


def test_max_visits_sums_a_problems_groups_over_steps():
    assert recorder.max_visits({"0": {"groups_of/3": 2, "groups_of/5": 1, "tokens": 9}, "4": {"groups_of/5": 2}}) == 3
    assert recorder.max_visits({}) == 0


# The problem split.


def test_blocks_follow_the_first_occurrence_of_each_key_and_skip_repeats_and_exclusions():
    keys = ["a", "b", "a", "x", "c", "d", "b", "e", "f", "g"]
    held_out, seeds = problems.disjoint_split(keys, held_out=2, per_seed=2, seeds=2, exclude={"x"})
    assert held_out == [0, 1] and seeds == [[4, 5], [7, 8]]
    problems.check_disjoint(keys, held_out, seeds)
    with pytest.raises(ValueError, match="holds 3 distinct problems .* need 5"):
        problems.disjoint_split(["a", "b", "c", "a"], held_out=1, per_seed=2, seeds=2)
    with pytest.raises(ValueError, match="seed 1's problem b is also in seed 0's training problems"):
        problems.check_disjoint(list("abcdefgh"), held_out=[7], per_seed=[[0, 1, 2], [1, 2, 3]])


def test_the_canonical_form_ignores_term_order_and_refuses_mixed_operators():
    assert problems.canonical_form("25 + 37") == problems.canonical_form("37 + 25")
    assert problems.canonical_form("7 - 3 + 2") == problems.canonical_form("2 + 7 - 3") == ((-1, 3), (1, 2), (1, 7))
    assert problems.canonical_form("5 + 0") == problems.canonical_form("5 - 0")
    with pytest.raises(ValueError, match="mixes"):
        problems.canonical_form("4 + 0 * 0")


# The analysis.


def record(arm, seed, below, above, fixed, kept=None, completions=64):
    """A complete run read at 40 tokens (below, score `below`) and 80 (above) around the budget 50."""
    def measured(value):
        return {"pass_rate": value, "truncated_fraction": 0.0}

    evaluations = [{"kind": "budget", "budget": 50, "side": "below", "step": 4, "tokens": 40,
                    "greedy": measured(below), "sampled": measured(below)},
                   {"kind": "budget", "budget": 50, "side": "above", "step": 8, "tokens": 80,
                    "greedy": measured(above), "sampled": measured(above)},
                   {"kind": "fixed_step", "step": 8, "tokens": 80, "greedy": measured(fixed),
                    "sampled": measured(fixed)}]
    return {"arm": arm, "seed": seed, "complete": True, "evaluations": evaluations,
            "settings": {"token_budgets": [50], "num_generations": 8, "fixed_step": 8},
            "probe": {"0": {"completions": completions, "groups": 8, "equal_score_groups": 4}},
            "logged": {} if kept is None else {"dynamic_sampling/kept_groups": {"1": kept}}}


def test_paired_differences_at_matched_tokens_and_their_power():
    runs = {"a": {s: record("a", s, 0.2 + 0.01 * s, 0.6, 0.5) for s in range(5)},
            "b": {s: record("b", s, 0.2, 0.6, 0.5 - 0.01 * s, kept=2) for s in range(5)}}
    spec = analysis.ComparisonSpec("a - b", "a", "b", "tokens", "non-inferiority", 0.04)
    found = analysis.compare(runs, spec)
    # At 50 tokens, a quarter of the way from 40 to 80: a's seed s scores 0.01 s x 0.75 more than b's.
    assert found.differences == pytest.approx([0.0075 * s for s in range(5)])
    assert found.passes() and found.verdict() == "non-inferior at 0.040"
    assert found.realised_sd == pytest.approx(0.0075 * math.sqrt(2.5))
    assert 0 < found.realised_power() <= 1 and found.realised_threshold() > 0
    fixed = analysis.compare(runs, analysis.ComparisonSpec("a - b", "a", "b", "fixed_step", "detection", 0.05))
    assert fixed.differences == pytest.approx([0.01 * s for s in range(5)]) and fixed.passes()
    # Generation: a (GRPOTrainer-like) trains the 4 groups whose rewards differ, b its 2 kept groups; 64 completions
    # generated before the last budget's reading below (step 4).
    generation = analysis.compare(runs, analysis.ComparisonSpec("a - b", "a", "b", "generation", "detection", 1.0))
    assert generation.differences == pytest.approx([64 / 32 - 64 / 16] * 5)
    with pytest.raises(ValueError, match="at='budget'; expected one of"):
        analysis.ComparisonSpec("a - b", "a", "b", "budget", "detection", 1.0)


def two_budget_record(arm, seed, scores, sampled_from=0):
    """A complete run with budgets 50 and 100: 50 read at 40 tokens (step 4) and 80 (step 8), 100 at 80 (the same
    boundary, step 8) and 120 (step 12); `scores` at steps 4, 8 and 12; the sampled pass rate only at the readings
    from index `sampled_from` on."""
    points = [(50, "below", 40, 4, 0), (50, "above", 80, 8, 1), (100, "below", 80, 8, 1), (100, "above", 120, 12, 2)]
    evaluations = [{"kind": "budget", "budget": budget, "side": side, "tokens": tokens, "step": step,
                    "greedy": {"pass_rate": scores[which], "truncated_fraction": 0.0},
                    "sampled": {"pass_rate": scores[which], "truncated_fraction": 0.0} if index >= sampled_from
                    else None}
                   for index, (budget, side, tokens, step, which) in enumerate(points)]
    return {"arm": arm, "seed": seed, "complete": True, "evaluations": evaluations, "machine": "m", "max_visits": 2,
            "settings": {"token_budgets": [50, 100], "num_generations": 8, "fixed_step": None,
                         "sampled_budgets": None if sampled_from == 0 else [100]},
            "probe": {"0": {"completions": 64, "groups": 8, "equal_score_groups": 4}}, "logged": {}}


def test_a_run_is_read_at_a_number_of_updates_interpolated_in_updates():
    run = two_budget_record("a", 0, (0.2, 0.4, 0.5))
    # Steps 4, 8 (read twice: one boundary, two budgets), 12.
    assert analysis.at_updates(6)(run) == pytest.approx(0.3)
    assert analysis.at_updates(8)(run) == pytest.approx(0.4) and analysis.at_updates(4)(run) == pytest.approx(0.2)
    assert analysis.at_updates(11)(run) == pytest.approx(0.475)
    # Interpolated in tokens instead, the budget 50 lies a quarter of the way from 40 to 80 tokens.
    assert analysis.at_budget(50)(run) == pytest.approx(0.25)
    for outside in (3, 13):
        with pytest.raises(ValueError, match=f"not read \\(greedy\\) on both sides of {outside} updates; its "
                                             "readings are at steps \\[4, 8, 12\\]"):
            analysis.at_updates(outside)(run)
    # The sampled pass rate was read at the budget 100 only (steps 8 and 12).
    sampled_late = two_budget_record("a", 0, (0.2, 0.4, 0.5), sampled_from=2)
    assert analysis.at_updates(10, "sampled")(sampled_late) == pytest.approx(0.45)
    with pytest.raises(ValueError, match="not read \\(sampled\\) on both sides of 6 updates"):
        analysis.at_updates(6, "sampled")(sampled_late)


def test_a_comparison_names_its_arms_reading_and_status_and_refuses_bad_fields():
    spec = analysis.ComparisonSpec("(1)", "a", "b", "tokens", "non-inferiority", 0.03)
    assert spec.status == analysis.FIXED == "fixed in advance" and spec.arms_text() == "`a` - `b`"
    assert spec.reading((4_000, 8_000)) == "mean of 4,000 and 8,000 tokens"
    assert spec.reading((2_000, 4_000, 8_000)) == "mean of 2,000, 4,000 and 8,000 tokens"
    assert spec.reading((8_000,)) == "at 8,000 tokens"
    budgets = spec.per_budget((4_000, 8_000))
    assert [(row.budget, row.reading((4_000, 8_000)), row.status, row.test) for row in budgets] == [
        (4_000, "at 4,000 tokens", "post hoc", "detection"), (8_000, "at 8,000 tokens", "post hoc", "detection")]
    assert math.isnan(budgets[0].threshold) and spec.per_budget((8_000,)) == [] and budgets[0].per_budget((1,)) == []
    updates = analysis.ComparisonSpec("u", "a", "b", "updates", "detection", math.nan, status="post hoc", updates=12)
    assert updates.reading((4_000, 8_000)) == "at 12 updates" and updates.per_budget((4_000, 8_000)) == []
    fixed = analysis.ComparisonSpec("f", "a", "b", "fixed_step", "detection", 0.05)
    assert fixed.reading((50,), fixed_step=12) == "after step 12"
    bad = [({"status": "planned"}, "status='planned'; expected one of \\('fixed in advance', 'exploratory', "
                                   "'post hoc'\\)"),
           ({"budget_status": "fixed"}, "budget_status='fixed'"),
           ({"at": "updates"}, "updates=None; expected an integer >= 1 with at='updates'"),
           ({"at": "updates", "updates": 0}, "updates=0"),
           ({"updates": 12}, "updates=12; expected an integer >= 1 with at='updates' and None otherwise"),
           ({"at": "fixed_step", "budget": 50}, "budget=50; expected a positive budget with at='tokens'")]
    for fields, message in bad:
        with pytest.raises(ValueError, match=f"ComparisonSpec 'x': .*{message}"):
            analysis.ComparisonSpec(**{"name": "x", "arm": "a", "other": "b", "at": "tokens", "test": "detection",
                                       "threshold": math.nan, **fields})


def test_comparisons_read_one_budget_or_a_number_of_updates():
    runs = {"a": {s: two_budget_record("a", s, (0.2 + 0.01 * s, 0.4, 0.5 + 0.02 * s)) for s in range(4)},
            "b": {s: two_budget_record("b", s, (0.2, 0.4, 0.5)) for s in range(4)}}

    def differences(**fields):
        spec = analysis.ComparisonSpec("a - b", "a", "b", test="detection", threshold=math.nan, **fields)
        return analysis.compare(runs, spec).differences

    # a's seed s: 0.01 s more at step 4 and 0.02 s more at step 12; at 50 tokens (3/4 of step 4's reading) 0.0075 s,
    # at 100 tokens (half way from step 8 to 12) 0.01 s, and their mean 0.00875 s.
    assert differences(at="tokens", budget=50) == pytest.approx([0.0075 * s for s in range(4)])
    assert differences(at="tokens", budget=100) == pytest.approx([0.01 * s for s in range(4)])
    assert differences(at="tokens") == pytest.approx([0.00875 * s for s in range(4)])
    assert differences(at="updates", updates=6) == pytest.approx([0.005 * s for s in range(4)])
    assert differences(at="updates", updates=8) == pytest.approx([0.0] * 4)


def test_the_report_labels_every_row_and_decides_on_the_comparisons_fixed_in_advance_only(tmp_path):
    import dataclasses

    from benchmarks.study_harness.example import STUDY
    from benchmarks.study_harness.report import report

    seen = {}

    def decide(found):
        seen.update(found)
        return ["decided"]

    fixed = analysis.ComparisonSpec("(1) a - b", "a", "b", "tokens", "non-inferiority", 0.03)
    explored = analysis.ComparisonSpec("(x) a - b", "a", "b", "tokens", "detection", math.nan, status="exploratory",
                                       budget_status="exploratory")
    updates = analysis.ComparisonSpec("(y) a - b", "a", "b", "updates", "detection", math.nan, status="post hoc",
                                      updates=6)
    study = dataclasses.replace(STUDY, arms={"a": "", "b": ""}, seeds=(0, 1, 2), decide=decide,
                                comparisons=(fixed, explored, updates),
                                settings=Settings(token_budgets=(50, 100), sampled_budgets=(100,), fixed_step=None))
    for seed in range(3):
        for arm, scores in (("a", (0.2 + 0.01 * seed, 0.4, 0.5 + 0.02 * seed)), ("b", (0.2, 0.4, 0.5))):
            (tmp_path / f"{arm}-seed{seed}.json").write_text(json.dumps(two_budget_record(arm, seed, scores, 2)))
    lines = report(study, str(tmp_path)).splitlines()
    rows = [line.split(" | ")[1:5] for line in lines if line.startswith("| (")]
    assert rows == [["`a` - `b`", "mean of 50 and 100 tokens", "fixed in advance", "3"],
                    ["`a` - `b`", "at 50 tokens", "post hoc", "3"], ["`a` - `b`", "at 100 tokens", "post hoc", "3"],
                    ["`a` - `b`", "mean of 50 and 100 tokens", "exploratory", "3"],
                    ["`a` - `b`", "at 50 tokens", "exploratory", "3"], ["`a` - `b`", "at 100 tokens", "exploratory", "3"],
                    ["`a` - `b`", "at 6 updates", "post hoc", "3"]]
    first = next(line for line in lines if line.startswith("| (1) a - b | `a` - `b` | mean of"))
    # The sampled pass rate was measured at the budget 100 only: the mean's cell says so; seeds 1 and 2 are ahead.
    assert "| 0.009 [" in first and "| 2 | non-inferior at 0.030 |" in first and "] (at 100 tokens) |" in first
    assert list(seen) == ["(1) a - b"] and "- decided" in lines


def test_power_formulas_agree_with_each_other():
    margin = analysis.smallest_margin(0.05, 10)
    assert analysis.noninferiority_power(margin, 0.05, 10) == pytest.approx(0.8, abs=1e-6)
    difference = analysis.smallest_detectable(0.05, 10)
    assert analysis.detection_power(difference, 0.05, 10) == pytest.approx(0.8, abs=1e-6)
    # The lower end of a two-sided 95 % interval: at no true difference it clears a margin of 0 one time in 40, and
    # detection's far tail is negligible, so the two thresholds nearly coincide.
    assert analysis.noninferiority_power(1e-12, 0.05, 10) == pytest.approx(0.025, abs=1e-6)
    assert difference == pytest.approx(margin, rel=1e-3)
    assert analysis.seeds_needed(margin, 0.05) == 10
    # Differences equal up to rounding (an SD of 1e-17): the thresholds scale with the SD.
    assert analysis.smallest_margin(1e-17, 15) == pytest.approx(analysis.smallest_margin(1.0, 15) * 1e-17, rel=1e-6)
    with pytest.raises(ValueError, match="seeds=1"):
        analysis.detection_power(0.1, 0.05, 1)


def test_the_report_reads_only_complete_runs_and_says_when_it_is_interim(tmp_path):
    from benchmarks.study_harness.example import STUDY
    from benchmarks.study_harness.report import report

    for seed in range(2):
        for arm in ("grpo", "defaults"):
            path = tmp_path / f"{arm}-seed{seed}.json"
            path.write_text(json.dumps({**record(arm, seed, 0.2, 0.6, 0.5), "machine": "m", "max_visits": 2}))
    (tmp_path / "dapo-seed0.json").write_text(json.dumps({"arm": "dapo", "seed": 0, "complete": False}))
    text = report(STUDY, str(tmp_path))
    assert "Complete runs: 4 of 30; seeds with every arm: none." in text
    assert "`grpo-seed1` | 40-80 | 0.300 / 0.300" in text
    assert "(interim: 0 of 10 seeds; nothing is decided)" in text and "## Decision" not in text


def test_the_example_arms_train_in_the_layout_and_name_the_defaults_by_value(tmp_path):
    from trl import GRPOTrainer

    from benchmarks.study_harness.example import STUDY
    from benchmarks.study_harness.runner import layout_config
    from trl_variants import DAPOTrainer

    shared = layout_config(STUDY.settings, seed=3)
    configs = {arm: STUDY.trainer_and_config(arm, str(tmp_path), shared) for arm in STUDY.arms}
    assert configs["grpo"][0] is GRPOTrainer and configs["dapo"][0] is configs["defaults"][0] is DAPOTrainer
    for _, config in configs.values():
        assert (config.per_device_train_batch_size, config.num_generations, config.steps_per_generation,
                config.save_steps, config.seed) == (16, 8, 4, 4, 3)
    assert configs["defaults"][1].dynamic_sampling_carry_surplus is True
    assert configs["dapo"][1].dynamic_sampling_carry_surplus is False
    with pytest.raises(ValueError, match="--arm 'carry_only' is not an arm of this study"):
        STUDY.trainer_and_config("carry_only", str(tmp_path), shared)


# Tokens to reach a target, and the median's bootstrap interval.


def test_tokens_to_reach_the_target_between_readings_is_linear_in_tokens():
    curve = [(0, 0.30), (1_000, 0.34), (3_000, 0.44), (5_000, 0.50)]
    # 0.40 lies 60 % of the way from 0.34 (1,000 tokens) to 0.44 (3,000 tokens).
    assert analysis.tokens_to_reach(curve, 0.40) == pytest.approx(2_200)
    assert analysis.tokens_to_reach(curve, 0.44) == 3_000  # exactly at a reading
    # The first crossing counts, even when the curve falls back below the target later.
    assert analysis.tokens_to_reach([(0, 0.3), (100, 0.5), (200, 0.2), (300, 0.6)], 0.4) == pytest.approx(50)


def test_tokens_to_reach_a_target_never_reached_is_infinite_and_one_reached_at_step0_is_zero():
    curve = [(0, 0.30), (1_000, 0.34), (3_000, 0.38)]
    assert analysis.tokens_to_reach(curve, 0.39) == math.inf
    assert analysis.tokens_to_reach(curve, 0.30) == 0.0 and analysis.tokens_to_reach(curve, 0.1) == 0.0
    # Two readings at the same tokens (one boundary read for two budgets): no slope to interpolate on.
    assert analysis.tokens_to_reach([(0, 0.3), (40, 0.3), (40, 0.5)], 0.4) == 40
    with pytest.raises(ValueError, match="expected \\(tokens, score\\) points in token order"):
        analysis.tokens_to_reach([(0, 0.3), (50, 0.4), (40, 0.5)], 0.4)


def test_tokens_ratios_read_the_reference_at_the_budget_and_the_arm_on_its_curve():
    # Budget 50 read at 40 (below) and 80 (above): b's seed 0 scores 0.2 + 0.4 x 0.25 = 0.3 at 50 tokens.
    # The fixed step (step 8) is the boundary read above, so it scores the same.
    runs = {"b": {0: record("b", 0, 0.2, 0.6, 0.6)},
            "a": {0: record("a", 0, 0.35, 0.6, 0.6)}}
    # a's curve: step 0 (0.1) at 0, 0.35 at 40, 0.6 at 80 (twice): 0.3 at 40 x 0.2 / 0.25 = 32 tokens.
    assert analysis.run_curve(runs["a"][0], 0.1) == [(0, 0.1), (40, 0.35), (80, 0.6), (80, 0.6)]
    assert analysis.tokens_ratios(runs, "a", "b", 0.1, 50) == pytest.approx([32 / 50])
    # The reference against itself reaches its own score by the budget.
    assert analysis.tokens_ratios(runs, "b", "b", 0.1, 50)[0] <= 1
    runs["a"][0] = record("a", 0, 0.25, 0.28, 0.2)  # never reaches 0.3
    assert analysis.tokens_ratios(runs, "a", "b", 0.1, 50) == [math.inf]


def test_the_bootstrap_interval_of_the_median_is_seeded_and_takes_censored_seeds():
    ratios = [0.5, 0.6, 0.55, 0.7, 0.8, 0.65, 0.9, 1.1, 0.45, 0.6, math.inf, 0.75, 0.5, 0.58, 0.62]
    found = analysis.bootstrap_median(ratios)
    assert found == analysis.bootstrap_median(ratios)  # the same resamples from the same generator seed
    assert found.median == 0.62 and found.n == 15
    assert found.low <= found.median <= found.high < math.inf
    # Most seeds censored: the median and the interval's upper end are infinite.
    assert analysis.bootstrap_median([0.5, math.inf, math.inf]).median == math.inf
    assert analysis.bootstrap_median([0.5, math.inf, math.inf]).high == math.inf
    # Equal values: no spread to resample.
    assert analysis.bootstrap_median([0.7] * 5) == analysis.MedianInterval(0.7, 0.7, 0.7, 5)
    assert analysis.bootstrap_median([]).n == 0 and analysis.bootstrap_median([]).text() == "n/a"
    with pytest.raises(ValueError, match="bootstrap_median: resamples=0"):
        analysis.bootstrap_median([0.5], resamples=0)
    with pytest.raises(ValueError, match="without NaN or negatives"):
        analysis.bootstrap_median([math.nan])


def test_ahead_needs_the_interval_entirely_above_zero():
    def found(differences, threshold=math.nan):
        spec = analysis.ComparisonSpec("a - b", "a", "b", "tokens", "ahead", threshold)
        return analysis.Comparison(spec, "greedy", tuple(differences), t_interval(differences))

    ahead = found([0.02, 0.03, 0.04, 0.03, 0.02], threshold=0.02)
    assert ahead.passes() and ahead.verdict() == "ahead"
    # Above zero needs power at the difference as non-inferiority at margin 0 does; none planned: no power given.
    assert ahead.realised_power() == pytest.approx(analysis.noninferiority_power(0.0, ahead.realised_sd, 5, 0.02))
    assert math.isnan(found([0.02, 0.03, 0.04]).realised_power())
    assert ahead.realised_threshold() == pytest.approx(analysis.smallest_margin(ahead.realised_sd, 5))
    # Clearly behind: detection would pass, "ahead" does not.
    behind = found([-0.02, -0.03, -0.04, -0.03, -0.02])
    assert behind.interval.excludes_zero() and not behind.passes()
    assert behind.verdict().startswith("not shown ahead (80 % power at ")
    with pytest.raises(ValueError, match="test='superiority'; expected one of"):
        analysis.ComparisonSpec("a - b", "a", "b", "tokens", "superiority", 0.0)


# Sampled evaluation at chosen budgets only.


def test_the_sampled_pass_rate_is_measured_at_step0_and_at_the_chosen_budgets_only():
    assert budgets.measures_sampled((50, 100), None, "budget", 50)
    assert budgets.measures_sampled((50, 100), None, "fixed_step")
    assert budgets.measures_sampled((50, 100), (100,), "step0")
    assert budgets.measures_sampled((50, 100), (100,), "budget", 100)
    assert not budgets.measures_sampled((50, 100), (100,), "budget", 50)
    assert not budgets.measures_sampled((50, 100), (100,), "fixed_step")
    with pytest.raises(ValueError, match="sampled_budgets=\\(70,\\): expected None or some of the token budgets"):
        budgets.measures_sampled((50, 100), (70,), "budget", 50)


def test_a_run_sampling_at_its_last_budget_only_records_greedy_elsewhere(tmp_path):
    run = Run(tmp_path, Settings(token_budgets=(50, 90), fixed_step=None, steps_per_generation=2,
                                 sampled_budgets=(90,)))
    run.generate(10)  # 40
    run.steps(2)
    run.generate(10)  # 80: passes 50, read below (greedy only)
    run.steps(2)
    run.generate(10)  # 120: 50 above and 90 below on boundary 80's weights, greedy once; 90's sampled
    run.steps(2)
    with pytest.raises(recorder.RunComplete):
        run.generate(10)  # 90 above at boundary 120
    assert run.calls == [(10_001, True), (10_001, True), (10_002, False), (10_002, True), (10_002, False)]
    record = run.recorder.finish()
    sampled = [(p["budget"], p["side"], p["sampled"] is not None) for p in record["evaluations"]]
    assert sampled == [(50, "below", False), (50, "above", False), (90, "below", True), (90, "above", True)]
    record["settings"] = {"token_budgets": [50, 90], "sampled_budgets": [90]}
    assert math.isnan(analysis.at_budget(50, "sampled")(record))
    assert analysis.budgets_measured(record["settings"], "sampled") == [90]
    assert analysis.budgets_measured(record["settings"], "greedy") == [50, 90]
    # The sampled mean over budgets reads the one budget that measured it: 0.10002 (below) to 0.10002 (above).
    assert analysis.over_budgets("sampled")(record) == pytest.approx(0.10002)


def test_the_report_gives_tokens_to_the_references_accuracy_and_its_gain_over_step0(tmp_path):
    import dataclasses

    from benchmarks.study_harness.example import STUDY
    from benchmarks.study_harness.report import report

    study = dataclasses.replace(STUDY, settings=Settings(token_budgets=(50,)), tokens_to_target=(("defaults", "grpo"),))
    for seed in range(2):
        for arm, below in (("grpo", 0.2), ("defaults", 0.35)):  # grpo: 0.3 at 50 tokens; defaults reaches it at 32
            (tmp_path / f"{arm}-seed{seed}.json").write_text(
                json.dumps({**record(arm, seed, below, 0.6, 0.6), "machine": "m", "max_visits": 2}))
    (tmp_path / "step0.json").write_text(json.dumps({"greedy": {"pass_rate": 0.1, "prompts": 300},
                                                     "sampled": {"pass_rate": 0.1}}))
    text = report(study, str(tmp_path))
    assert "## Tokens to reach the reference's greedy accuracy at 50 tokens" in text
    assert "| `defaults` to `grpo` | 2 | 0.64 [0.64, 0.64] | 0.64, 0.64 | 0.200 [" in text


def test_updates_truncation_and_logged_means_per_run():
    run = record("a", 0, 0.2, 0.6, 0.6)  # read at step 4 (40 tokens) and step 8 (80 tokens) around 50
    assert analysis.updates_at(50)(run) == pytest.approx(5.0)
    for point, share in zip(run["evaluations"], (0.1, 0.3, 0.2)):
        point["greedy"]["truncated_fraction"] = share
        point["sampled"] = None if share == 0.3 else {"pass_rate": 0.0, "truncated_fraction": share / 2}
    assert analysis.highest_truncation(run) == 0.3
    run["logged"] = {"clip_ratio/high_mean": {"1": 0.1, "2": 0.3}}
    assert analysis.logged_mean("clip_ratio/high_mean")(run) == pytest.approx(0.2)
    assert math.isnan(analysis.logged_mean("clip_ratio/low_mean")(run))


def test_the_probe_counts_every_completion_of_rounds_that_are_not_whole_groups():
    """Rounds that give a prompt a few more completions at a time: the probe counts their tokens
    (the budgets read them) and outcomes, counts only whole groups as groups, and the rest as ungrouped."""
    def reward(prompts, completions, completion_ids, trainer_state=None, **kwargs):
        return [1.0 if index % 3 else 0.0 for index, _ in enumerate(completions)]

    probe = OutcomeProbe(reward, 4, passed=lambda value: value >= 1.0, group_key="reasoning_gym_index")
    prompts, problems = ["p", "p", "q"] + ["r"] * 4, [1, 1, 2] + [3] * 4
    probe.reward_func(prompts=prompts, completions=["c"] * 7, completion_ids=[[0] * 5] * 7,
                      trainer_state=types.SimpleNamespace(global_step=2), reasoning_gym_index=problems)
    row = probe.per_step[2]
    assert (row["tokens"], row["completions"], row["correct"], row["wrong"]) == (35, 7, 4, 3)
    assert (row["groups"], row["ungrouped_completions"], row["equal_score_groups"]) == (1, 3, 0)
    assert {key: value for key, value in row.items() if key.startswith("groups_of/")} == {"groups_of/3": 1}


def test_a_report_pairs_runs_of_one_machine_and_names_the_others():
    from benchmarks.study_harness.report import one_machine

    def record(machine):
        return {"machine": machine}

    runs = {"grpo": {0: record("A"), 1: record("A"), 2: record("B")}, "drop": {0: record("A"), 1: record("B")}}
    kept, left_out = one_machine(runs)
    assert kept == {"grpo": {0: record("A"), 1: record("A")}, "drop": {0: record("A")}}
    assert left_out == ["drop-seed1 (B)", "grpo-seed2 (B)"]
    assert one_machine({"grpo": {0: record("A")}}) == ({"grpo": {0: record("A")}}, [])
    # A machine shown to reproduce another's runs exactly counts as it.
    assert one_machine(runs, aliases=(("B", "A"),)) == (runs, [])


def test_a_report_reuses_another_studys_runs_of_an_arm(tmp_path):
    from benchmarks.study_harness.report import study_runs

    def write(folder, arm, seed):
        folder.mkdir(exist_ok=True)
        (folder / f"{arm}-seed{seed}.json").write_text(json.dumps({"arm": arm, "seed": seed, "complete": True}))

    own, other = tmp_path / "own", tmp_path / "other"
    write(own, "drop", 0), write(own, "grpo", 0), write(other, "grpo", 0), write(other, "grpo", 1)
    study = types.SimpleNamespace(reused_runs=(("grpo", str(other)),))
    runs = study_runs(study, str(own))
    assert sorted(runs["grpo"]) == [0, 1] and sorted(runs["drop"]) == [0]
    assert study_runs(types.SimpleNamespace(reused_runs=()), str(own))["grpo"].keys() == {0}
