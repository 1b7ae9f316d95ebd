"""Study 3's comparisons without a model: hand-made records with known scores, token counts and group counts, and
the method's rules read on them (non-inferiority, detection, validity, instability, the decision, generation per
informative row, clip-higher per batch and the realised power)."""

import json
import math

import pytest

from benchmarks.real_model_study import power_formulas
from benchmarks.real_model_study3 import analysis
from benchmarks.real_model_study3.design import RESULTS_DIR
from benchmarks.shared.stats import t_interval

with open(f"{RESULTS_DIR}/plan.json", encoding="utf-8") as handle:
    PLAN = json.load(handle)
STEP0 = {"greedy": {"pass_rate": 0.40}, "sampled": {"pass_rate": 0.30}}


def evaluation(kind, step, greedy, sampled=None, tokens=1000, budget=None, truncated=0.0):
    point = {"kind": kind, "step": step, "tokens": tokens,
             "greedy": {"pass_rate": greedy, "truncated_fraction": truncated},
             "sampled": {"pass_rate": greedy - 0.1 if sampled is None else sampled, "truncated_fraction": 0.0}}
    return {**point, "budget": budget} if kind == "budget" else point


def record(arm, seed, at_4000, at_8000, at_step12, complete=True, truncated=0.0, probe=None, logged=None):
    """A run evaluated at 4,000 tokens (step 4), 8,000 tokens (step 12) and step 12, with greedy accuracies given."""
    return {"arm": arm, "seed": seed, "complete": complete,
            "settings": {"token_budgets": [4000, 8000], "num_generations": 8, "steps_per_generation": 4},
            "evaluations": [evaluation("budget", 4, at_4000, budget=4000, tokens=3000),
                            evaluation("fixed_step", 12, at_step12, tokens=7000),
                            evaluation("budget", 12, at_8000, budget=8000, tokens=7000, truncated=truncated)],
            "probe": probe or {}, "logged": logged or {}, "step_cpu_seconds": [1.0] * 12, "max_visits": 1}


def grid(defaults_gain, dapo_gain=0.0, grpo=(0.50, 0.55, 0.52, 0.60, 0.48), noise=(0.01, -0.01, 0.02, 0.0, -0.02)):
    """Five seeds: `grpo` scores `grpo[s]` everywhere, `dapo` that plus `dapo_gain + noise[s]`, `defaults` dapo's
    plus `defaults_gain`."""
    runs = {"grpo": {}, "dapo": {}, "defaults": {}}
    for seed, (base, wobble) in enumerate(zip(grpo, noise, strict=True)):
        dapo = base + dapo_gain + wobble
        runs["grpo"][seed] = record("grpo", seed, base, base, base)
        runs["dapo"][seed] = record("dapo", seed, dapo, dapo, dapo)
        runs["defaults"][seed] = record("defaults", seed, dapo + defaults_gain, dapo + defaults_gain,
                                        dapo + defaults_gain)
    return runs


def test_comparison_one_is_the_interval_of_the_per_seed_mean_over_budgets_against_the_margin():
    runs = grid(defaults_gain=0.0)
    runs["defaults"][0]["evaluations"][0]["greedy"]["pass_rate"] += 0.10  # seed 0: +0.10 at 4,000, 0 at 8,000
    found = analysis.comparisons(runs, PLAN)["(1)"]
    expected = [0.05 + 0.01, -0.01, 0.02, 0.0, -0.02]  # (defaults - grpo) averaged over the two budgets
    assert found.differences == pytest.approx(expected)
    assert found.interval == t_interval(found.differences)
    assert found.test == "non-inferiority" and found.planned_threshold == 0.04
    assert found.passes() == (found.interval.low > -0.04)
    worse = analysis.comparisons(grid(defaults_gain=-0.08), PLAN)["(1)"]
    assert worse.interval.high < 0 and not worse.passes()


def test_comparisons_pair_only_seeds_where_both_runs_are_complete():
    runs = grid(defaults_gain=0.0)
    runs["defaults"][3]["complete"] = False
    del runs["grpo"][4]
    assert analysis.complete_seeds(runs, ("defaults", "grpo")) == [0, 1, 2]
    assert len(analysis.comparisons(runs, PLAN)["(1)"].differences) == 3
    assert len(analysis.comparisons(runs, PLAN)["(3)"].differences) == 4


def test_detection_comparisons_read_the_fixed_step_and_report_a_null_with_what_the_spread_detects():
    runs = grid(defaults_gain=0.0, dapo_gain=0.10)
    found = analysis.comparisons(runs, PLAN)
    assert found["(2) step"].passes() and found["(2) step"].interval.mean == pytest.approx(0.10)
    assert found["(2) tokens"].interval.mean == pytest.approx(0.10)
    null = found["(3)"]
    assert null.differences == pytest.approx([0.0] * 5) and not null.passes()
    assert math.isnan(null.realised_threshold())  # no spread at all: nothing to size
    spread = analysis.comparisons(grid(defaults_gain=0.0), PLAN)["(2) step"]
    assert spread.realised_sd == pytest.approx(0.0158113883)
    assert spread.realised_threshold() == pytest.approx(power_formulas.smallest_detectable(spread.realised_sd, 5))
    assert spread.realised_power() == pytest.approx(
        power_formulas.detection_power(spread.planned_threshold, spread.realised_sd, 5))
    one = analysis.comparisons(runs, PLAN)["(1)"]
    assert one.realised_threshold() == pytest.approx(power_formulas.smallest_margin(one.realised_sd, 5))


def test_the_sampled_pass_rate_is_compared_alike():
    runs = grid(defaults_gain=0.0, dapo_gain=0.05)
    for seed, run in runs["dapo"].items():
        for point in run["evaluations"]:
            point["sampled"]["pass_rate"] = point["greedy"]["pass_rate"] - 0.1 + 0.02 * seed
    found = analysis.comparisons(runs, PLAN, "sampled")["(2) step"]
    assert found.differences == pytest.approx([0.05 + w + 0.02 * s for s, w in enumerate((0.01, -0.01, 0.02, 0.0,
                                                                                          -0.02))])


def test_a_missing_evaluation_is_named():
    run = record("dapo", 3, 0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="dapo-seed3 has no budget evaluation at budget 6000"):
        analysis.point(run, "budget", 6000)
    with pytest.raises(ValueError, match="measure='pass'"):
        analysis.score(run["evaluations"][0], "pass")


def test_validity_needs_grpos_gain_at_the_last_budget_to_clear_twice_the_margin():
    runs = grid(defaults_gain=0.0)  # grpo 0.48-0.60 against step 0's 0.40: gains 0.08-0.20
    interval, valid = analysis.validity(runs, STEP0)
    assert interval.mean == pytest.approx(0.13) and valid == (interval.low >= 0.08)
    assert not valid  # the lower end is 0.072
    interval, valid = analysis.validity(grid(defaults_gain=0.0, grpo=(0.55, 0.56, 0.57, 0.58, 0.56)), STEP0)
    assert valid and interval.low >= 0.08


def test_generation_per_informative_row_counts_every_round_and_only_trained_informative_rows():
    # grpo: 3 batches before step 12, 8 groups each, 2, 5 and 0 with equal rewards: 17 informative of 24.
    grpo_probe = {str(at): {"completions": 64, "groups": 8, "equal_score_groups": equal}
                  for at, equal in ((0, 2), (4, 5), (8, 0), (12, 3))}
    grpo = record("grpo", 0, 0.5, 0.5, 0.5, probe=grpo_probe)
    assert analysis.generation_per_informative_row(grpo) == pytest.approx(192 / (17 * 8))
    assert analysis.informative_untrained(grpo) == 0
    # dapo: rounds of 12, 18 and 18 groups; 8 kept each batch (logged at the batch's first step); 13 informative in
    # the third batch, so 5 dropped (or carried past the boundary); the batch at step 12 is after the boundary.
    probe = {"0": {"completions": 96, "groups": 12, "equal_score_groups": 4},
             "4": {"completions": 144, "groups": 18, "equal_score_groups": 10},
             "8": {"completions": 144, "groups": 18, "equal_score_groups": 5},
             "12": {"completions": 128, "groups": 16, "equal_score_groups": 7}}
    kept = {"dynamic_sampling/kept_groups": {"1": 8.0, "5": 8.0, "9": 8.0, "13": 8.0}}
    dapo = record("dapo", 0, 0.5, 0.5, 0.5, probe=probe, logged=kept)
    assert analysis.generation_per_informative_row(dapo) == pytest.approx(384 / 192)
    assert analysis.informative_untrained(dapo) == 5


def test_comparison_four_is_paired_per_seed_and_listed_with_the_comparisons():
    from benchmarks.real_model_study3.grid_report import comparison_rows

    def probe(equal_per_batch):  # three batches of 8 groups (64 completions) before the last budget
        return {str(at): {"completions": 64, "groups": 8, "equal_score_groups": equal}
                for at, equal in zip((0, 4, 8), equal_per_batch, strict=True)}

    runs = {"grpo": {}, "dapo": {}, "defaults": {}}
    for seed, extra in enumerate((0, 1, 2)):
        runs["grpo"][seed] = record("grpo", seed, 0.5, 0.5, 0.5, probe=probe((4, 4, 4 - extra)))
        for arm, kept in (("dapo", 6.0), ("defaults", 8.0)):
            logged = {"dynamic_sampling/kept_groups": {"1": kept, "5": kept, "9": kept - extra}}
            runs[arm][seed] = record(arm, seed, 0.5, 0.5, 0.5, probe=probe((0, 0, 0)), logged=logged)
    found = analysis.generation_comparisons(runs, PLAN)
    expected = [192 / ((24 - extra) * 8) - 192 / ((18 - extra) * 8) for extra in (0, 1, 2)]
    assert found["defaults - dapo"].differences == pytest.approx(expected)
    rows = {row[0]: row for row in comparison_rows(runs, PLAN)}
    row = rows["(4) `defaults` - `dapo`, completions per informative row"]
    assert row[1:3] == ["3", t_interval(expected).text(2)]
    assert "(4) `dapo` - `grpo`, completions per informative row" in rows


def test_carried_groups_trained_count_batches_that_began_by_the_step():
    run = record("defaults", 0, 0.5, 0.5, 0.5, logged={"dynamic_sampling/carried_groups": {"5": 2.0, "9": 3.0,
                                                                                          "13": 4.0}})
    assert analysis.carried_groups_trained(run, 12) == 5 and analysis.carried_groups_trained(run, 4) == 0


def test_clip_higher_is_averaged_per_generation_batch_over_the_runs_that_trained_it():
    logged = {"clip_ratio/high_mean": {"1": 0.0, "2": 0.02, "3": 0.04, "4": 0.02, "5": 0.1}}
    runs = {"dapo": {0: record("dapo", 0, 0.5, 0.5, 0.5, logged=logged),
                     1: record("dapo", 1, 0.5, 0.5, 0.5, logged={"clip_ratio/high_mean": {"1": 0.04}})}}
    rows = analysis.clip_by_batch(runs, "dapo")
    assert rows[0] == (1, 4, pytest.approx((0.02 + 0.04) / 2), 2)
    assert rows[1] == (5, 8, pytest.approx(0.1), 1)
    assert [row[:2] for row in rows] == [(1, 4), (5, 8), (9, 12)]


def test_instability_flags_an_evaluation_above_the_limit_and_holds_the_decision_on_that_arm():
    runs = grid(defaults_gain=0.0, grpo=(0.6, 0.6, 0.62, 0.61, 0.6))
    assert analysis.unstable_runs(runs) == []
    runs["defaults"][2] = record("defaults", 2, 0.6, 0.6, 0.6, truncated=0.25)
    assert analysis.unstable_runs(runs) == [("defaults", 2, "8,000 tokens", "greedy", 0.25)]
    assert analysis.truncation(runs, "defaults")["8,000 tokens"]["greedy"] == [0.0, 0.0, 0.25, 0.0, 0.0]
    assert analysis.decide(runs, STEP0, PLAN, range(5)) == ["held"]


def test_the_decision_follows_the_methods_order():
    valid = (0.6, 0.6, 0.62, 0.61, 0.6)
    assert analysis.decide(grid(0.0, grpo=valid), STEP0, PLAN, range(6)) == ["pending"]
    assert analysis.decide(grid(0.0, grpo=valid), STEP0, PLAN, range(5)) == ["non_inferior"]
    assert analysis.decide(grid(-0.02, dapo_gain=-0.05, grpo=valid), STEP0, PLAN, range(5)) == [
        "carrying_off", "not_shown"]
    assert analysis.decide(grid(0.0), STEP0, PLAN, range(5)) == ["invalid"]
    assert set(analysis.DECISIONS) >= {"pending", "held", "carrying_off", "invalid", "non_inferior", "not_shown"}


def test_the_carried_rows_ratio_pools_the_steps_that_trained_carried_rows():
    logged = {"dynamic_sampling/carried_ratio_mean": {"5": 1.01, "9": 0.97},
              "dynamic_sampling/carried_ratio_max": {"5": 1.4, "9": 2.5}}
    runs = {"defaults": {0: record("defaults", 0, 0.5, 0.5, 0.5, logged=logged),
                         1: record("defaults", 1, 0.5, 0.5, 0.5)}}
    assert analysis.carried_ratio(runs, "defaults") == (pytest.approx(0.99), 2.5, 2)
    assert analysis.carried_ratio({"defaults": {1: runs["defaults"][1]}}, "defaults")[2] == 0
