"""The allocation study's pilot (`benchmarks/allocation_study/pilot.py`): its rules as pure functions of result
records, and its candidate tasks' problems; and the study (`study.py`): its arms' real configs, its task and its
decision, without a model."""

import math
import os

import pytest

from benchmarks.allocation_study import pilot, study
from benchmarks.shared.stats import t_interval
from benchmarks.study_harness import analysis
from benchmarks.study_harness.problems import study_problems
from benchmarks.study_harness.runner import layout_config


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


def rate_record(first: float, last: float) -> dict:
    """A complete `grpo` record read exactly at the pilot's first and last budgets."""
    budgets = pilot.SETTINGS.token_budgets
    points = [{"kind": "budget", "budget": budget, "side": "below", "tokens": budget, "greedy": {"pass_rate": value}}
              for budget, value in ((budgets[0], first), (budgets[-1], last))]
    return {"settings": {"token_budgets": list(budgets)}, "evaluations": points, "arm": "grpo", "seed": 15}


def test_a_learning_rate_spans_the_budgets_when_it_gains_enough_and_not_mostly_by_the_first():
    step0 = step0_record(0.30, 0.20)
    spans = pilot.rate_verdict(step0, rate_record(0.40, 0.48))  # 0.10 of 0.18 by 2,000 tokens
    assert spans["spans"] and spans["gain_first_budget"] == pytest.approx(0.10)
    assert not pilot.rate_verdict(step0, rate_record(0.45, 0.48))["spans"]  # 0.15 of 0.18: a plateau after
    assert not pilot.rate_verdict(step0, rate_record(0.31, 0.37))["spans"]  # gains 0.07 by the last budget
    assert pilot.choose_rate({3e-6: {"spans": True}, 1e-6: {"spans": True}}) == 3e-6
    assert pilot.choose_rate({3e-6: {"spans": False}, 1e-6: {"spans": True}}) == 1e-6
    assert pilot.choose_rate({3e-6: {"spans": False}}) is None


@pytest.mark.parametrize("name", sorted(pilot.CANDIDATES))
def test_every_candidate_task_has_its_held_out_set_and_disjoint_blocks(name):
    study = pilot.candidate_study(name)
    problems = study_problems(study, study.settings, len(study.seeds) + 1)  # check_disjoint runs inside
    assert len(problems["held_out"]["indices"]) == 300
    assert [len(block["indices"]) for block in problems["train"]] == [32] * (len(pilot.SEEDS) + 1)


# The study itself (benchmarks/allocation_study/study.py): its arms build real configs in the harness's layout.


def test_the_study_arms_train_in_the_layout_and_name_the_defaults_by_value(tmp_path):
    from trl import GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer
    from trl_variants.dynamic_sampling.selection import resolve_sampling_options

    found = study.allocation_study("A")
    assert list(found.arms) == ["grpo", "defaults", "allocation"] and found.seeds == tuple(range(15))
    assert (found.settings.train_size, found.settings.held_out_prompts, found.settings.token_budgets,
            found.settings.sampled_budgets) == (32, 300, (4_000, 8_000), (8_000,))
    shared = layout_config(found.settings, seed=3)
    configs = {arm: found.trainer_and_config(arm, str(tmp_path), shared) for arm in found.arms}
    assert configs["grpo"][0] is GRPOTrainer and configs["defaults"][0] is configs["allocation"][0] is DAPOTrainer
    for _, config in configs.values():
        assert (config.per_device_train_batch_size, config.num_generations, config.steps_per_generation,
                config.max_completion_length, config.save_steps, config.seed) == (16, 8, 4, 32, 4, 3)
    # `defaults` is what DAPOConfig() resolves to in this layout; if a default changes, this study's arm does not.
    shipped = DAPOConfig(str(tmp_path), **shared)
    for name, value in study.DEFAULTS.items():
        if name != "dynamic_sampling_carry_surplus":
            assert getattr(shipped, name) == value, name
    assert shipped.dynamic_sampling_carry_surplus is None and resolve_sampling_options(
        True, False, None, 1, shipped.steps_per_generation, 1, False).carry_surplus is True
    allocation = configs["allocation"][1]
    assert allocation.dynamic_sampling_allocation and allocation.skip_memory_epochs == 1.0
    assert not configs["defaults"][1].dynamic_sampling_allocation
    assert {name: getattr(allocation, name) for name in study.DEFAULTS if name != "dynamic_sampling_allocation"} == {
        name: getattr(configs["defaults"][1], name) for name in study.DEFAULTS if name != "dynamic_sampling_allocation"}
    with pytest.raises(ValueError, match="--arm 'grpo_rows' is not an arm of the allocation study"):
        found.trainer_and_config("grpo_rows", str(tmp_path), shared)


def test_the_allocation_arm_refuses_allocator_constants_other_than_the_methods(tmp_path, monkeypatch):
    from trl_variants.experimental.allocation import allocator

    shared = layout_config(study.SETTINGS, seed=0)
    monkeypatch.setattr(allocator, "CHUNK", 4)
    with pytest.raises(ValueError, match="allocation arm: the allocator's constants are .*'CHUNK': 4"):
        study.trainer_and_config("allocation", str(tmp_path), shared)


def test_the_study_shares_the_pilots_problems_and_refuses_an_unknown_task():
    found = study.allocation_study("B")
    assert (found.task, found.draw_seed, found.draw_size) == (pilot.CANDIDATES["B"], 56_000, 8_000)
    assert found.results_dir.endswith(os.path.join("docs", "results", "allocation_study"))
    with pytest.raises(ValueError, match="allocation_study: task='D'; expected one of \\['A', 'B', 'C'\\]"):
        study.allocation_study("D")


def test_the_study_runs_the_pilots_choices(monkeypatch, tmp_path, capsys):
    assert (study.TASK, study.SETTINGS.token_budgets, study.SETTINGS.sampled_budgets) == ("A", (4_000, 8_000), (8_000,))
    assert study.SETTINGS.learning_rate in pilot.RATE_CANDIDATES + (pilot.SETTINGS.learning_rate,)
    assert study.command_line(["report", "--runs_dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("# Allocation study, task A: report")


def test_the_decision_needs_validity_non_inferiority_to_grpo_and_ahead_of_the_defaults():
    def found(spec, differences):
        return analysis.Comparison(spec, "greedy", tuple(differences), t_interval(differences))

    first, second = study.COMPARISONS[:2]
    assert (first.test, first.threshold, second.test) == ("non-inferiority", 0.03, "ahead")
    close, above, behind = [0.0, 0.01, -0.01, 0.005, 0.0], [0.02, 0.03, 0.04, 0.03, 0.02], [0.0, 0.01, -0.01, 0.0, 0.0]
    learnt, flat = t_interval([0.10, 0.12, 0.11, 0.09, 0.10]), t_interval([0.02, 0.1, 0.06, 0.0, 0.05])
    tokens = {analysis.tokens_key("allocation", "grpo"): analysis.bootstrap_median([0.5, 0.6, 0.7, 0.6, 0.65])}

    def decision(gain, ahead):
        return study.decide({first.name: found(first, close), second.name: found(second, ahead),
                             analysis.gain_key("grpo"): gain, **tokens})

    lines = decision(learnt, above)
    assert lines[0].startswith("Validity: `grpo`'s gain over step 0 0.104 [") and "lower end at least 0.06" in lines[0]
    assert lines[1].startswith("(1) non-inferior at 0.030") and lines[2].startswith("(2) ahead")
    assert lines[3].startswith("(3) tokens to reach `grpo`'s final accuracy, median ratio 0.60 [")
    assert lines[4] == "the allocation mode becomes the default"
    assert decision(learnt, behind)[-1] == "the allocation mode stays opt-in: (2) failed"
    assert decision(flat, above)[-1].startswith("no decision: the runs learnt too little")


def test_the_full_report_decides_by_the_methods_rule(tmp_path):
    import dataclasses
    import json

    from benchmarks.study_harness.report import report
    from tests.test_study_harness import record

    # The comparisons fixed in advance (the added ones read 12 updates, which these records do not reach).
    fixed = tuple(spec for spec in study.COMPARISONS if spec.status == "fixed in advance")
    found = dataclasses.replace(study.allocation_study("A"), comparisons=fixed,
                                settings=dataclasses.replace(study.SETTINGS, token_budgets=(50,)))
    for seed in found.seeds:  # read at 40 and 80 tokens around 50: grpo 0.3 there, the others reach it sooner
        for arm, below in (("grpo", 0.2), ("defaults", 0.35), ("allocation", 0.36 + 0.001 * seed)):
            (tmp_path / f"{arm}-seed{seed}.json").write_text(json.dumps(
                {**record(arm, seed, below, 0.6 + 0.001 * (seed % 3), 0.6), "machine": "m", "max_visits": 2}))
    (tmp_path / "step0.json").write_text(json.dumps({"greedy": {"pass_rate": 0.1, "prompts": 300},
                                                     "sampled": {"pass_rate": 0.1}}))
    text = report(found, str(tmp_path))
    assert "| `allocation` to `grpo` | 15 |" in text and "| `defaults` to `grpo` | 15 | 0.64 [0.64, 0.64] |" in text
    # GRPOTrainer's record trains the 4 of 8 groups whose rewards differ: 64 completions for 32 informative rows.
    assert "| `grpo` | 15 | 5.0 | 2.00 | - / - / - | 0.0% |" in text
    assert "## Decision" in text and "- the allocation mode becomes the default" in text
