"""The real-model benchmark's report on hand-made result files: the horizon, reading accuracy at equal budgets,
informative trained rows, and the decision rule of docs/results/real_model_method.md."""

import pytest


@pytest.fixture
def report_module():
    from benchmarks.real_model import real_model_report

    return real_model_report


def make_run(arm, seed, accuracy, tokens_per_step=100, seconds_per_step=2.0, eval_every=5, equal_groups=1,
             kept_groups=2):
    """A result file of `len(accuracy) - 1` stretches of `eval_every` steps, 4 groups of 8 generated per step."""
    steps = [eval_every * index for index in range(len(accuracy))]
    last = steps[-1]
    probe = {str(step): {"tokens": tokens_per_step, "completions": 32, "groups": 4, "all_correct": 0,
                         "all_wrong": equal_groups, "equal_score_groups": equal_groups} for step in range(last)}
    return {
        "arm": arm, "seed": seed, "settings": {"num_generations": 8, "eval_every": eval_every},
        "eval_steps": steps, "accuracy": accuracy, "eval_tokens": [tokens_per_step * step for step in steps],
        "train_cpu_seconds": [seconds_per_step * step for step in steps], "probe": probe,
        "logged": {"dynamic_sampling/kept_groups": {str(step): kept_groups for step in range(1, last + 1)}},
    }  # fmt: skip


def test_horizon_is_the_last_evaluation_every_run_reached(report_module):
    runs = [make_run("grpo", 0, [0.1, 0.2, 0.3]), make_run("dapo", 0, [0.1, 0.2])]
    assert report_module.horizon(runs) == 5
    assert report_module.upto(runs[0], 5) == 2


def test_accuracy_at_equal_tokens_is_linear_between_evaluations_and_stops_at_the_horizon(report_module):
    run = make_run("dapo", 0, [0.0, 0.4, 0.8], tokens_per_step=100)
    assert report_module.accuracy_at(run, "eval_tokens", 250, last_step=10) == pytest.approx(0.2)
    assert report_module.accuracy_at(run, "eval_tokens", 750, last_step=10) == pytest.approx(0.6)
    # Past the horizon the run's value at the horizon is held, never a later evaluation's.
    assert report_module.accuracy_at(run, "eval_tokens", 2_000, last_step=5) == pytest.approx(0.4)


def test_informative_rows_are_kept_groups_under_dynamic_sampling_and_unequal_groups_otherwise(report_module):
    dapo = make_run("dapo", 0, [0.1, 0.2], kept_groups=4)
    grpo = make_run("grpo", 0, [0.1, 0.2], equal_groups=1)
    # 5 steps: dynamic sampling trained 4 kept groups of 8 each step; GRPO trained 3 informative groups of 8.
    assert report_module.informative_trained_rows(dapo, 5) == 5 * 4 * 8
    assert report_module.informative_trained_rows(grpo, 5) == 5 * 3 * 8
    assert report_module.completions_per_informative_row(grpo, 5) == pytest.approx(5 * 32 / (5 * 24))
    assert report_module.degenerate_share(grpo, 5) == pytest.approx(0.25)


def decide(report_module, candidate_accuracy, grpo_finals=(0.6, 0.61, 0.62), candidate_tokens=60):
    by_arm = {
        "grpo": [make_run("grpo", seed, [0.2, 0.5, final]) for seed, final in enumerate(grpo_finals)],
        "dapo": [make_run("dapo", seed, [0.2, 0.5 + 0.01 * seed, 0.6 + 0.02 * seed]) for seed in range(3)],
        "dapo_skip_carry": [make_run("dapo_skip_carry", seed, [0.2, *[value + 0.01 * seed for value in
                                                                       candidate_accuracy]],
                                     tokens_per_step=candidate_tokens) for seed in range(3)],
    }  # fmt: skip
    tokens = min(run["eval_tokens"][-1] for runs in by_arm.values() for run in runs)
    return report_module.decision(by_arm, 10, tokens)


def test_decision_turns_skipping_and_carrying_on_when_they_lose_nothing(report_module):
    turn_on, reasons = decide(report_module, [0.52, 0.63])
    assert turn_on, reasons
    assert reasons[-1].startswith("Decision: skipping and carrying become")


def test_decision_keeps_them_off_when_a_per_step_interval_lies_below_zero(report_module):
    turn_on, reasons = decide(report_module, [0.40, 0.63])
    assert not turn_on
    assert any("entirely below zero at step 5" in reason for reason in reasons)


def test_decision_keeps_them_off_when_they_trail_at_equal_tokens(report_module):
    # As many tokens per step as DAPO: the equal-token point is DAPO's horizon, where the candidate trails.
    turn_on, reasons = decide(report_module, [0.50, 0.59], candidate_tokens=100)
    assert not turn_on
    assert any(reason.startswith("(a)") and "does not reach" in reason for reason in reasons)


def test_decision_is_inconclusive_when_grpo_does_not_rise_beyond_its_seed_spread(report_module):
    # A mean gain of 0.1 against a spread of 0.1 between seeds at the horizon.
    turn_on, reasons = decide(report_module, [0.52, 0.63], grpo_finals=(0.2, 0.3, 0.4))
    assert not turn_on
    assert "not more than twice the spread" in reasons[0]


def test_no_decision_before_every_seed_of_the_compared_arms_is_in(report_module):
    by_arm = {arm: [make_run(arm, 0, [0.2, 0.5, 0.6])] for arm in ("grpo", "dapo", "dapo_skip_carry")}
    turn_on, reasons = report_module.decision(by_arm, 10, 500)
    assert not turn_on
    assert reasons[-1].startswith("No decision yet: the rule needs 3 seeds")


def test_the_committed_report_is_what_report_prints_from_the_committed_result_files(report_module):
    """docs/results/real_model_benchmark.md, whose figures the README and docs quote, is what `report` gives on
    benchmarks/real_model/results/ (pure arithmetic on the result files, so any machine gives the same text)."""
    from benchmarks.real_model.arms import RESULTS_DIR
    from tests.test_benchmarks_smoke import REPO

    committed = (REPO / "docs" / "results" / "real_model_benchmark.md").read_text(encoding="utf-8").rstrip("\n")
    printed = report_module.report(RESULTS_DIR, None)
    # The last line names the commands; the committed file's names its --output, which this call leaves out.
    assert printed.rsplit("\n", 1)[0] == committed.rsplit("\n", 1)[0]
    assert committed.rsplit("\n", 1)[1].startswith(printed.rsplit("\n", 1)[1].split(" Written by")[0])
