"""The flat-groups study (`benchmarks/flat_groups_study/`): its arms' real configs, that it runs the allocation
study's task and settings (read back from that study's committed run files, so that the check needs none of its
code), its decision rule, and the regeneration-waste reading, all without a model."""

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks.flat_groups_study import regeneration_waste, study
from benchmarks.shared.stats import t_interval
from benchmarks.study_harness import analysis
from benchmarks.study_harness.runner import layout_config

ALLOCATION_RUNS = Path(__file__).resolve().parents[1] / "docs" / "results" / "allocation_study" / "runs"


@pytest.mark.parametrize("arm", ["grpo", "defaults"])
def test_the_study_runs_the_allocation_studys_task_settings_and_arms(arm):
    record = json.loads((ALLOCATION_RUNS / f"{arm}-seed3.json").read_text())
    assert record["settings"] == json.loads(json.dumps(dataclasses.asdict(study.SETTINGS)))
    assert (tuple(record["task"][0:1]), record["task"][1]) == ((study.TASK[0],), study.TASK[1])
    assert record["draw_seed"] == study.DRAW_SEED and study.SEEDS == tuple(range(15))


def test_the_arms_differ_only_in_what_the_study_compares(tmp_path):
    shared = layout_config(study.SETTINGS, seed=0)
    configs = {arm: study.trainer_and_config(arm, str(tmp_path / arm), shared) for arm in study.ARMS}
    assert [trainer.__name__ for trainer, _ in configs.values()] == ["GRPOTrainer", "DAPOTrainer", "DAPOTrainer"]
    defaults, drop = configs["defaults"][1], configs["drop"][1]
    assert (defaults.dynamic_sampling, drop.dynamic_sampling) == ("regenerate", "drop")
    assert (defaults.dynamic_sampling_carry_surplus, drop.dynamic_sampling_carry_surplus) == (True, None)
    differing = {field.name for field in dataclasses.fields(defaults)
                 if getattr(defaults, field.name) != getattr(drop, field.name)}  # fmt: skip
    assert differing <= {"dynamic_sampling", "dynamic_sampling_carry_surplus", "output_dir", "run_name"}
    assert {"dynamic_sampling", "dynamic_sampling_carry_surplus"} <= differing
    for _, config in configs.values():
        assert (config.learning_rate, config.steps_per_generation, config.num_generations) == (3e-6, 4, 8)
    with pytest.raises(ValueError, match="is not an arm of the flat-groups study"):
        study.trainer_and_config("allocation", str(tmp_path), shared)


def test_the_decision_follows_the_methods_rule():
    def found(spec, differences):
        return analysis.Comparison(spec, "greedy", tuple(differences), t_interval(differences))

    first, second = study.COMPARISONS[:2]
    assert (first.arm, first.other, first.test, first.threshold) == ("drop", "grpo", "non-inferiority", 0.03)
    assert (second.arm, second.other, second.test) == ("drop", "defaults", "ahead")
    close, behind = [0.0, 0.01, -0.01, 0.005, 0.0], [-0.05, -0.06, -0.04, -0.05, -0.07]
    above, level = [0.04, 0.05, 0.06, 0.05, 0.04], [0.0, 0.01, -0.01, 0.0, 0.0]
    learnt, flat = t_interval([0.10, 0.12, 0.11, 0.09, 0.10]), t_interval([0.02, 0.1, 0.06, 0.0, 0.05])

    def decision(gain, versus_grpo, versus_defaults):
        return study.decide({first.name: found(first, versus_grpo), second.name: found(second, versus_defaults),
                             analysis.gain_key("grpo"): gain})

    assert decision(learnt, close, above)[-1].startswith('DAPOTrainer\'s default becomes dynamic_sampling="drop"')
    assert decision(learnt, close, level)[-1].startswith('the README recommends dynamic_sampling="drop"')
    assert decision(learnt, behind, above)[-1].startswith("nothing changes: (1) failed")
    assert decision(flat, close, above)[-1].startswith("no decision: the runs learnt too little")


def test_regeneration_waste_follows_every_informative_group_of_a_run():
    """Two generation batches of 8 groups: the first generates 20 groups in two rounds, 12 informative: 8 trained,
    3 carried and 1 dropped; the second trains the 3 carried and 5 of its own 7 informative, carrying 2 (the tail)."""
    record = {
        "settings": {"token_budgets": [1000], "num_generations": 8},
        "evaluations": [{"kind": "budget", "budget": 1000, "side": "below", "tokens": 990, "step": 8},
                        {"kind": "budget", "budget": 1000, "side": "above", "tokens": 1200, "step": 12}],
        "probe": {"0": {"groups": 20, "equal_score_groups": 8}, "4": {"groups": 8, "equal_score_groups": 1},
                  "8": {"groups": 8, "equal_score_groups": 0}},
        "logged": {"dynamic_sampling/rounds": {"1": 2.0, "5": 1.0}, "dynamic_sampling/kept_groups": {"1": 8.0, "5": 8.0},
                   "dynamic_sampling/carried_groups": {"1": 0.0, "5": 3.0},
                   "dynamic_sampling/dropped_informative_groups": {"1": 1.0, "5": 0.0}},
    }  # fmt: skip
    found = regeneration_waste.waste(record)
    assert (found["informative"], found["dropped"], found["carried_and_trained"], found["tail"]) == (19, 1, 3, 2)
    assert found["completions"] == 28 * 8 and found["trained_rows"] == 16 * 8
    assert found["flat_share"] == pytest.approx(9 / 28)
    assert found["oversizing"] == 0.0  # the one single-round batch generated exactly its 8 groups


def test_the_committed_defaults_runs_drop_few_informative_groups(capsys):
    assert regeneration_waste.command_line(["--runs_dir", str(ALLOCATION_RUNS), "--seeds", "0", "9"]) == 0
    text = capsys.readouterr().out
    assert "| 9 | 24 | 8 | 8 | 5 | 3 |" in text and "2 seeds. Informative groups generated but never trained" in text


def test_the_regeneration_figures_in_the_docs_are_what_the_reading_prints(capsys):
    assert regeneration_waste.command_line(["--runs_dir", str(ALLOCATION_RUNS)]) == 0
    printed = capsys.readouterr().out
    expected = ["6 of 422 (1.4%); the tail: 41", "defaults 0.360, grpo 0.366", "1.82 as the harness reads it",
                "1.63 counting the tail as trained"]  # fmt: skip
    assert all(text in printed for text in expected), printed
    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in (docs / "results" / "flat_groups_study" / "README.md", docs / "evidence.md"):
        text = " ".join(page.read_text().split())
        for figure in ("0.360", "0.366", "1.63", "1.82", "41", "(1.4 %"):
            assert figure in text, (page.name, figure)


def test_the_report_pairs_drop_runs_with_the_reused_runs_of_the_checked_machine():
    """Plan A (the method's reuse check passed): `grpo` and `defaults` come from the allocation study's runs, and the
    AVX2 machine that reproduced them counts as theirs, so no run is left out."""
    from benchmarks.study_harness.report import one_machine, study_runs

    runs_dir = Path(study.STUDY.results_dir) / "runs"
    runs, left_out = one_machine(study_runs(study.STUDY, str(runs_dir)), study.STUDY.machine_aliases)
    assert left_out == [] and len(runs["grpo"]) == len(runs["defaults"]) == 15
    assert {record["machine"] for record in runs["drop"].values()} == {study.CHECKED_MACHINE[0]}
    check = json.loads((runs_dir / "grpo-seed0.json").read_text())
    assert check["evaluations"][-1]["greedy"] == {**runs["grpo"][0]["evaluations"][-1]["greedy"],
                                                  "seconds": check["evaluations"][-1]["greedy"]["seconds"]}
