"""The allocation study's pilot (`benchmarks/allocation_study/pilot.py`): its rules as pure functions of result
records, and its candidate tasks' problems, without a model."""

import math

import pytest

from benchmarks.allocation_study import pilot
from benchmarks.study_harness.problems import study_problems


def pilot_record(gain_reading: float, equal_score: list[int], groups_per_batch: int = 8) -> dict:
    """A complete `grpo` record read at its last budget (exactly at it) and probe counts per generation batch."""
    budgets = pilot.SETTINGS.token_budgets
    steps = pilot.SETTINGS.steps_per_generation
    return {
        "settings": {"token_budgets": list(budgets), "steps_per_generation": steps},
        "evaluations": [{"kind": "budget", "budget": budgets[-1], "side": "below", "tokens": budgets[-1],
                         "greedy": {"pass_rate": gain_reading}, "sampled": {"pass_rate": 0.0}}],
        "probe": {str(batch * steps): {"groups": groups_per_batch, "equal_score_groups": count}
                  for batch, count in enumerate(equal_score)},
        "arm": "grpo", "seed": pilot.PILOT_BLOCK,
    }  # fmt: skip


def step0_record(greedy: float, sampled: float) -> dict:
    return {"greedy": {"pass_rate": greedy}, "sampled": {"pass_rate": sampled}}


def test_degenerate_share_counts_the_first_four_generation_batches():
    record = pilot_record(0.5, [8, 4, 2, 2, 8, 8])  # the last two batches are past the four counted
    assert pilot.degenerate_share(record) == pytest.approx(16 / 32)
    assert math.isnan(pilot.degenerate_share({**record, "probe": {}}))


def test_a_task_is_eligible_when_step0_is_in_range_and_grpo_gains_enough():
    in_range = pilot.verdict(step0_record(0.40, 0.30), pilot_record(0.50, [4] * 4))
    assert in_range["eligible"] and in_range["greedy_gain"] == pytest.approx(0.10)
    assert not pilot.verdict(step0_record(0.40, 0.30), pilot_record(0.47, [4] * 4))["eligible"]  # gain 0.07
    assert not pilot.verdict(step0_record(0.40, 0.10), pilot_record(0.60, [4] * 4))["eligible"]  # too hard
    assert not pilot.verdict(step0_record(0.60, 0.50), pilot_record(0.80, [4] * 4))["eligible"]  # too easy


def test_the_chosen_task_is_the_eligible_one_with_most_degenerate_groups():
    def found(eligible, share):
        return {"eligible": eligible, "degenerate_share": share}

    assert pilot.choose({"A": found(True, 0.3), "B": found(True, 0.6), "C": found(False, 0.9)}) == "B"
    assert pilot.choose({"A": found(True, 0.5), "B": found(True, 0.5), "C": found(True, 0.5)}) == "A"  # ties: order
    assert pilot.choose({"C": found(True, 0.1)}) == "C"
    assert pilot.choose({"A": found(False, 0.5), "B": found(False, 0.9)}) is None
    assert pilot.choose({}) is None


@pytest.mark.parametrize("name", sorted(pilot.CANDIDATES))
def test_every_candidate_task_has_its_held_out_set_and_disjoint_blocks(name):
    study = pilot.candidate_study(name)
    problems = study_problems(study, study.settings, len(study.seeds) + 1)  # check_disjoint runs inside
    assert len(problems["held_out"]["indices"]) == 300
    assert [len(block["indices"]) for block in problems["train"]] == [32] * (len(pilot.SEEDS) + 1)
