"""The real-model study's comparisons on hand-made result records: each is checked against arithmetic done by hand,
so the report's (a), (b), (c), validity check and skipping counts mean what docs/results/real_model_study_method.md
says."""

import math

import pytest


@pytest.fixture
def analysis():
    from benchmarks.real_model_study import study_analysis

    return study_analysis


def make_record(arm, seed, accuracy, tokens=(0, 100, 200, 300, 400), complete=True, probe=None, logged=None):
    return {"arm": arm, "seed": seed, "complete": complete, "eval_steps": [0, 5, 10, 15, 20][: len(accuracy)],
            "accuracy": list(accuracy), "eval_tokens": list(tokens)[: len(accuracy)], "probe": probe or {},
            "logged": logged or {}, "settings": {"num_generations": 8}, "train_indices": [3, 7]}


def grid(arm_values: dict) -> dict:
    """arm -> list over seeds of accuracy series -> runs."""
    return {arm: {seed: make_record(arm, seed, series) for seed, series in enumerate(values)}
            for arm, values in arm_values.items()}


def test_non_inferiority_reads_the_lower_end_of_the_mean_over_later_evaluations(analysis):
    # Per seed, defaults - dapo averaged over steps 5-20: -0.01, +0.01, 0.0 -> mean 0, sd 0.01, t(2) = 4.303.
    dapo = [[0.3, 0.4, 0.4, 0.4, 0.4]] * 3
    defaults = [[0.3, 0.39, 0.39, 0.39, 0.39], [0.3, 0.41, 0.41, 0.41, 0.41], [0.3, 0.4, 0.4, 0.4, 0.4]]
    interval, non_inferior = analysis.non_inferiority(grid({"dapo": dapo, "defaults": defaults}))
    assert interval.mean == pytest.approx(0.0, abs=1e-12)
    assert interval.low == pytest.approx(-4.303 * 0.01 / math.sqrt(3), abs=1e-3)
    assert non_inferior  # -0.0248 > -0.035
    wider = [[0.3, 0.37, 0.37, 0.37, 0.37], [0.3, 0.43, 0.43, 0.43, 0.43], [0.3, 0.4, 0.4, 0.4, 0.4]]
    interval, non_inferior = analysis.non_inferiority(grid({"dapo": dapo, "defaults": wider}))
    assert interval.low == pytest.approx(-4.303 * 0.03 / math.sqrt(3), abs=1e-3) and not non_inferior


def test_comparisons_use_complete_pairs_only(analysis):
    runs = grid({"dapo": [[0.3, 0.4, 0.4, 0.4, 0.4]] * 3, "defaults": [[0.3, 0.5, 0.5, 0.5, 0.5]] * 2})
    runs["defaults"][2] = make_record("defaults", 2, [0.3, 0.0], complete=False)
    assert analysis.complete_seeds(runs, ("defaults", "dapo")) == [0, 1]
    interval, _ = analysis.non_inferiority(runs)
    assert interval.n == 2 and interval.mean == pytest.approx(0.1)


def test_validity_needs_the_lower_end_of_dapos_gain_at_twice_the_margin(analysis):
    def runs_gaining(gains):
        return grid({"dapo": [[0.3] + [0.3 + gain] * 4 for gain in gains]})

    interval, valid = analysis.validity(runs_gaining([0.10, 0.11, 0.12]))
    assert interval.mean == pytest.approx(0.11) and interval.low == pytest.approx(0.11 - 0.0248, abs=1e-3)
    assert valid
    interval, valid = analysis.validity(runs_gaining([0.08, 0.09, 0.10]))  # lower end 0.065 < 0.07
    assert not valid


def test_accuracy_is_read_linearly_between_evaluations_by_generated_tokens(analysis):
    record = make_record("dapo", 0, [0.2, 0.4, 0.5, 0.5, 0.6], tokens=(0, 100, 300, 300, 500))
    assert analysis.interpolated_accuracy(record, 50) == pytest.approx(0.3)
    assert analysis.interpolated_accuracy(record, 200) == pytest.approx(0.45)
    assert analysis.interpolated_accuracy(record, 300) == pytest.approx(0.5)
    assert analysis.interpolated_accuracy(record, 500) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="501 tokens is outside the run's 0..500"):
        analysis.interpolated_accuracy(record, 501)


def test_equal_tokens_compares_at_the_fewest_tokens_of_any_paired_run(analysis):
    runs = {"grpo": {0: make_record("grpo", 0, [0.2, 0.3, 0.4, 0.5, 0.6], tokens=(0, 100, 200, 300, 400)),
                     1: make_record("grpo", 1, [0.2, 0.3, 0.4, 0.5, 0.6], tokens=(0, 100, 200, 300, 400))},
            "dapo": {0: make_record("dapo", 0, [0.2, 0.4, 0.5, 0.6, 0.7], tokens=(0, 200, 400, 600, 800)),
                     1: make_record("dapo", 1, [0.2, 0.5, 0.6, 0.7, 0.8], tokens=(0, 200, 400, 600, 800))}}
    budget, interval = analysis.equal_tokens(runs)
    # At 400 tokens: grpo 0.6 in both seeds; dapo 0.5 and 0.6 -> differences -0.1 and 0.0.
    assert budget == 400
    assert interval.mean == pytest.approx(-0.05) and interval.n == 2


def probe_of(per_step):
    return {str(step): counts for step, counts in enumerate(per_step)}


def test_generation_per_informative_row_for_grpo_and_dynamic_sampling(analysis):
    # GRPOTrainer: 2 groups of 8 per step, 1 of them with differing rewards in step 1, both in step 2.
    grpo = make_record("grpo", 0, [0.2, 0.3], tokens=(0, 10))
    grpo["eval_steps"] = [0, 2]
    grpo["probe"] = probe_of([{"completions": 16, "groups": 2, "equal_score_groups": 1},
                              {"completions": 16, "groups": 2, "equal_score_groups": 0}])
    assert analysis.generation_per_informative_row(grpo) == pytest.approx(32 / (3 * 8))
    # Dynamic sampling: the trained informative groups are the logged kept groups (carried ones included).
    dapo = make_record("dapo", 0, [0.2, 0.3], tokens=(0, 10))
    dapo["eval_steps"] = [0, 2]
    dapo["probe"] = probe_of([{"completions": 48, "groups": 6}, {"completions": 32, "groups": 4}])
    dapo["logged"] = {"dynamic_sampling/kept_groups": {"1": 2.0, "2": 2.0}}
    assert analysis.generation_per_informative_row(dapo) == pytest.approx(80 / 32)


def test_skipping_activity_per_stretch_and_groups_per_problem(analysis):
    record = make_record("defaults", 0, [0.2, 0.3, 0.4], tokens=(0, 10, 20))
    record["eval_steps"] = [0, 5, 7]
    record["logged"] = {"dynamic_sampling/skipped_prompts": {"2": 1.0, "6": 2.0},
                        "dynamic_sampling/generated_groups": {str(step): 3.0 for step in range(1, 8)},
                        "dynamic_sampling/carried_groups": {"3": 1.0},
                        "dynamic_sampling/rounds": {str(step): 2.0 for step in range(1, 8)}}
    record["probe"] = probe_of([{"groups_of/3": 2, "groups_of/7": 1}] + [{"groups_of/3": 1}] * 6)
    first, second = analysis.skipping_activity(record)
    assert first == {"steps": (1, 5), "skipped": 1.0, "considered": 16.0, "carried": 1.0, "rounds": 10.0}
    assert second == {"steps": (6, 7), "skipped": 2.0, "considered": 8.0, "carried": 0.0, "rounds": 4.0}
    assert analysis.skipped_share(record) == pytest.approx(3 / 24)
    assert analysis.groups_per_problem(record) == {"3": 8, "7": 1}


def test_group_shares_per_stretch(analysis):
    record = make_record("grpo", 0, [0.2, 0.3], tokens=(0, 10))
    record["eval_steps"] = [0, 5]
    record["probe"] = probe_of([{"groups": 2, "equal_score_groups": 1, "all_correct": 1, "all_wrong": 0}] * 5)
    (share,) = analysis.group_shares(record)
    assert share == {"steps": (1, 5), "groups": 10, "equal_score_groups": 0.5, "all_correct": 0.5, "all_wrong": 0.0}


def test_accuracy_at_a_step_the_run_did_not_evaluate_is_refused(analysis):
    with pytest.raises(ValueError, match="grpo-seed0 has no evaluation at step 7"):
        analysis.accuracy_at(make_record("grpo", 0, [0.2, 0.3]), 7)


def full_record(arm, seed, later, complete=True):
    """A complete 20-step run: 0.25 at step 0, `later` at steps 5-20, 2 groups per step of which one informative."""
    record = make_record(arm, seed, [0.25] + [later] * 4, tokens=(0, 500, 1000, 1500, 2000), complete=complete)
    record.update(machine="test machine", device="cpu", commit="abcdef0123", train_cpu_seconds=[0, 1, 2, 3, 40],
                  attempts=[{"commit": "abcdef0123"}])
    record["probe"] = probe_of([{"completions": 16, "groups": 2, "equal_score_groups": 1, "all_correct": 1,
                                 "groups_of/3": 1, "groups_of/7": 1}] * 20)
    if arm != "grpo":
        record["logged"] = {"dynamic_sampling/kept_groups": {str(step): 2.0 for step in range(1, 21)},
                            "dynamic_sampling/generated_groups": {str(step): 4.0 for step in range(1, 21)},
                            "dynamic_sampling/skipped_prompts": {"4": 1.0}}
    return record


def write_runs(folder, arms_later: dict, seeds=range(8)):
    import json

    (folder / "step0.json").write_text(json.dumps({"pass_rate": {"pass_rate": 0.25, "prompts": 300,
                                                                 "samples_per_prompt": 1}}))
    for arm, later in arms_later.items():
        for seed in seeds:
            (folder / f"{arm}-seed{seed}.json").write_text(json.dumps(full_record(arm, seed, later + 0.001 * seed)))


def test_report_takes_no_decision_until_every_seed_of_the_compared_arms_is_in(tmp_path):
    from benchmarks.real_model_study.study_report import report

    write_runs(tmp_path, {"grpo": 0.35, "dapo": 0.40, "defaults": 0.40}, seeds=range(3))
    text = report(str(tmp_path))
    assert "No decision yet: 3 of 8 seeds" in text
    assert text.count("(interim: 3 of 8 seeds; judged only when every seed is in)") == 4  # (a), (b) twice, validity
    assert "non-inferior" not in text and "null result" not in text and "**fails**" not in text
    assert "| `defaults` | 3 of 8 | 0, 1, 2 | 0 |" in text


def test_report_judges_a_when_dapo_and_defaults_are_in_while_b_waits_for_grpo(tmp_path):
    from benchmarks.real_model_study.study_report import report

    write_runs(tmp_path, {"dapo": 0.40, "defaults": 0.40})
    write_runs(tmp_path, {"grpo": 0.35}, seeds=range(7))
    text = report(str(tmp_path))
    assert "(a) passes and the validity check holds" in text and "**non-inferior**" in text
    assert "**holds**" in text
    assert text.count("(interim: 7 of 8 seeds; judged only when every seed is in)") == 2  # (b) twice


def test_report_decides_the_defaults_by_non_inferiority_and_validity(tmp_path):
    from benchmarks.real_model_study.study_report import report

    write_runs(tmp_path, {"grpo": 0.35, "dapo": 0.40, "defaults": 0.40})
    text = report(str(tmp_path), str(tmp_path / "report.md"))
    assert "(a) passes and the validity check holds: skipping and carrying stay on by default." in text
    assert (tmp_path / "report.png").stat().st_size > 0
    # dapo - grpo = 0.05 in every seed: a difference; defaults - dapo = 0: non-inferior.
    assert "`dapo` - `grpo` at equal steps (mean over the evaluations after step 0): 0.050" in text
    assert "**non-inferior**" in text


def test_report_turns_skipping_off_when_carry_only_passes_and_the_defaults_fail(tmp_path):
    from benchmarks.real_model_study.study_report import report

    write_runs(tmp_path, {"grpo": 0.35, "dapo": 0.40, "defaults": 0.33})
    assert "(a) fails: skipping defaults to off" in report(str(tmp_path))
    write_runs(tmp_path, {"carry_only": 0.40})
    text = report(str(tmp_path))
    assert "**passes**: skipping defaults to off, carrying stays on" in text
    assert "`carry_only` - `dapo` (reported, not deciding)" in text
    write_runs(tmp_path, {"carry_only": 0.33})
    assert "**fails** too: skipping and carrying default to off" in report(str(tmp_path))
    write_runs(tmp_path, {"dapo": 0.31, "defaults": 0.31})  # gains of 0.06-0.07: too little learnt
    assert "The validity check fails" in report(str(tmp_path))


def test_outcome_probe_counts_groups_per_value_of_a_column():
    from benchmarks.shared.outcome_probe import OutcomeProbe

    def reward(completions, reasoning_gym_index, **kwargs):
        return [1.0 if completion == "right" else 0.0 for completion in completions]

    probe = OutcomeProbe(reward, num_generations=2, group_key="reasoning_gym_index")
    state = type("State", (), {"global_step": 4})()
    probe.reward_func(prompts=["a", "a", "b", "b", "a", "a"], completions=["right", "wrong", "wrong", "wrong", "right", "right"],
                      completion_ids=[[1], [1, 2], [1], [1], [1], [1]], trainer_state=state, reasoning_gym_index=[5, 5, 9, 9, 5, 5])
    row = probe.per_step[4]
    assert row["groups_of/5"] == 2 and row["groups_of/9"] == 1
    assert (row["groups"], row["all_correct"], row["all_wrong"], row["equal_score_groups"]) == (3, 1, 1, 2)


def test_the_committed_study_report_is_what_report_prints_from_the_committed_result_files():
    """docs/results/real_model_study.md is `report` on benchmarks/real_model_study/results/runs/ (arithmetic on the
    complete result files only, so any checkout prints the same text): regenerate it whenever a run is committed."""
    from benchmarks.real_model_study.design import RUNS_DIR
    from benchmarks.real_model_study.study_report import report
    from tests.test_benchmarks_smoke import REPO

    committed = (REPO / "docs" / "results" / "real_model_study.md").read_text(encoding="utf-8")
    assert committed == report(RUNS_DIR) + "\n"


def test_report_on_one_seed_says_what_is_pending_instead_of_judging(tmp_path):
    from benchmarks.real_model_study.study_report import report

    write_runs(tmp_path, {"grpo": 0.35, "dapo": 0.40, "defaults": 0.40}, seeds=range(1))
    text = report(str(tmp_path))
    for pending in ("(a) `defaults` - `dapo`: pending (1 seed with both complete)",
                    "(b) `dapo` - `grpo`: pending (1 seed with both complete)",
                    "Validity: pending (1 complete `dapo` run)"):
        assert pending in text
    assert "non-inferior" not in text and "null result" not in text


def test_decide_follows_the_method_outcome_by_outcome(analysis):
    def runs_with(arms_later: dict, seeds=range(8)) -> dict:
        return {arm: {seed: full_record(arm, seed, later + 0.001 * seed) for seed in seeds}
                for arm, later in arms_later.items()}

    seeds = list(range(8))
    assert analysis.decide(runs_with({"dapo": 0.40, "defaults": 0.40}, seeds=range(7)), seeds) == "pending"
    assert analysis.decide(runs_with({"dapo": 0.31, "defaults": 0.31}), seeds) == "invalid"
    assert analysis.decide(runs_with({"dapo": 0.40, "defaults": 0.40}), seeds) == "non_inferior"
    failing = {"dapo": 0.40, "defaults": 0.33}
    assert analysis.decide(runs_with(failing), seeds) == "pending_carry_only"
    assert analysis.decide(runs_with({**failing, "carry_only": 0.39}), seeds) == "carry_only_passes"
    assert analysis.decide(runs_with({**failing, "carry_only": 0.36}), seeds) == "carry_only_fails"
    assert set(analysis.DECIDED_DEFAULTS) == {"pending", "invalid", "non_inferior", "pending_carry_only",
                                              "carry_only_passes", "carry_only_fails"}


def test_the_package_defaults_follow_the_studys_decision(analysis, tmp_path):
    from benchmarks.real_model_study.design import RUNS_DIR, SEEDS
    from benchmarks.real_model_study.study_report import load_runs
    from trl_variants import DAPOConfig
    from trl_variants.dynamic_sampling.options import resolve_sampling_options

    outcome = analysis.decide(load_runs(RUNS_DIR), list(SEEDS))
    decided = analysis.DECIDED_DEFAULTS[outcome]
    if decided is None:
        pytest.skip(f"the real-model study has not decided the defaults yet ({outcome})")
    config = DAPOConfig(str(tmp_path), use_cpu=True, report_to=[])  # every sampling option at its default
    resolved = resolve_sampling_options(config.dynamic_sampling, config.skip_degenerate_prompts,
                                        config.dynamic_sampling_carry_surplus, config.gradient_accumulation_steps,
                                        config.steps_per_generation, config.num_iterations,
                                        is_vision_language_model=False)
    defaults = {"skip_degenerate_prompts": resolved.skip_degenerate_prompts,
                "dynamic_sampling_carry_surplus": resolved.carry_surplus}
    # An outcome may settle one option and leave the other to a later arm; only what it settles is checked.
    assert {name: defaults[name] for name in decided} == decided, outcome
