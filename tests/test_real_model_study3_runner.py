"""Study 3's runner without a model: the evaluation points' generator seeds, the budget trigger on the boundary's
weights, the end of a run, the cut of a record to a checkpoint, what each arm trains, and the pilot's rules."""

import json
import types

import pytest

from benchmarks.real_model_study3 import recorder as study_recorder
from benchmarks.real_model_study3 import report as study_report
from benchmarks.real_model_study3.design import PILOT_SETTINGS, Settings
from benchmarks.shared.outcome_probe import OutcomeProbe
from trl_variants.real.evaluation import PassRate


def test_each_evaluation_point_has_the_generator_seed_the_method_fixes():
    seeds = [study_recorder.point_seed(Settings(), "step0"), study_recorder.point_seed(Settings(), "budget", 0),
             study_recorder.point_seed(Settings(), "budget", 1), study_recorder.point_seed(Settings(), "fixed_step")]
    assert seeds == [10_000, 10_001, 10_002, 10_003]
    with pytest.raises(ValueError, match="budget_index=2"):
        study_recorder.point_seed(Settings(), "budget", 2)
    with pytest.raises(ValueError, match="kind='step 12'"):
        study_recorder.point_seed(Settings(), "step 12")


def pass_rate(seed: int, greedy: bool) -> PassRate:
    return PassRate(pass_rate=seed / 100_000, mean_score=0.0, prompts=2, samples_per_prompt=1, per_prompt=[0, 1],
                    always_right=1, always_wrong=1, mean_completion_tokens=5.0, truncated_fraction=0.0,
                    greedy=greedy, seconds=0.0)


class Run:
    """A BudgetRecorder driven as the trainer drives it: generation rounds at boundaries (each a reward call), then
    optimizer steps."""

    def __init__(self, tmp_path, settings):
        self.calls = []

        def evaluate(model, seed, greedy):
            self.calls.append((seed, greedy))
            return pass_rate(seed, greedy)

        def reward(prompts, completions, completion_ids, trainer_state=None, **kwargs):
            return [1.0 if index % 2 else 0.0 for index, _ in enumerate(completions)]

        self.probe = OutcomeProbe(reward, 2, passed=lambda value: value >= 1.0, group_key="reasoning_gym_index")
        self.path = tmp_path / "run.json"
        self.recorder = study_recorder.BudgetRecorder(str(self.path), {"arm": "grpo"}, {"commit": "x"}, self.probe,
                                                      settings, ("clip_ratio/high_mean",), evaluate)
        self.reward = self.recorder.wrap_reward(self.probe.reward_func)
        self.state = types.SimpleNamespace(global_step=0)
        self.control = types.SimpleNamespace(should_training_stop=False)
        self.recorder.on_train_begin(None, self.state, self.control, model="model")

    def generate(self, tokens_each: int, completions: int = 4, problem: int = 7):
        ids = [[0] * tokens_each] * completions
        self.reward(prompts=["p"] * completions, completions=["c"] * completions, completion_ids=ids,
                    trainer_state=self.state, reasoning_gym_index=[problem] * completions)

    def step(self, high: float = 0.1):
        self.recorder.on_step_begin(None, self.state, self.control)
        self.state.global_step += 1
        self.recorder.on_step_end(None, self.state, self.control)
        self.recorder.on_log(None, self.state, self.control, logs={"clip_ratio/high_mean": high, "loss": 1.0})


def test_a_budget_is_read_on_the_boundary_weights_before_the_batch_that_passes_it_trains(tmp_path):
    settings = Settings(token_budgets=(50, 100), fixed_step=4, steps_per_generation=2)
    run = Run(tmp_path, settings)
    run.generate(10)  # 40 tokens at boundary 0
    run.step(), run.step()
    run.generate(10)  # 80 tokens: budget 50 passed while the weights are still step 2's
    [point] = run.recorder.record["evaluations"]
    assert (point["kind"], point["budget"], point["step"], point["tokens"], point["tokens_generated"]) == (
        "budget", 50, 2, 40, 80)
    assert run.calls == [(10_001, True), (10_001, False)]
    run.step(), run.step()  # step 4: the fixed step, evaluated after it
    assert run.recorder.record["evaluations"][-1]["kind"] == "fixed_step"
    assert run.recorder.record["evaluations"][-1]["tokens"] == 80 and not run.control.should_training_stop
    # Boundary 4's batch passes 100 in its second round: read on step 4's weights, whose greedy result is reused.
    run.generate(2)
    with pytest.raises(study_recorder.RunComplete):
        run.generate(10)
    point = run.recorder.record["evaluations"][-1]
    assert (point["budget"], point["step"], point["tokens"], point["tokens_generated"]) == (100, 4, 80, 128)
    assert run.calls[2:] == [(10_003, True), (10_003, False), (10_002, False)]
    record = run.recorder.finish()
    assert record["complete"] and record["max_visits"] == 8  # 4 rounds x 4 completions / 2 per group of problem 7
    assert json.loads(run.path.read_text())["logged"]["clip_ratio/high_mean"] == {str(s): 0.1 for s in range(1, 5)}
    assert len(record["step_cpu_seconds"]) == 4 and record["attempts"] == [{"commit": "x"}]


def test_a_run_with_every_budget_read_stops_at_the_fixed_step(tmp_path):
    run = Run(tmp_path, Settings(token_budgets=(10,), fixed_step=2, steps_per_generation=2))
    run.generate(5)  # passes 10 at boundary 0: read on the starting weights
    assert run.recorder.record["evaluations"][0]["tokens"] == 0
    run.step()
    assert not run.control.should_training_stop
    run.step()
    assert run.control.should_training_stop and run.recorder.finish()["complete"]


def test_the_pilot_ends_at_its_only_budget(tmp_path):
    run = Run(tmp_path, PILOT_SETTINGS)
    run.generate(32, completions=64)  # 2,048 tokens
    for _ in range(4):
        run.step()
    with pytest.raises(study_recorder.RunComplete):
        run.generate(32, completions=64)  # 4,096: passes 4,000, read on step 4's weights at 2,048
    assert [(point["kind"], point["step"], point["tokens"]) for point in run.recorder.record["evaluations"]] == [
        ("budget", 4, 2_048)]


def test_a_record_cut_to_a_checkpoint_keeps_what_the_checkpoint_knew():
    record = {"complete": False, "step_cpu_seconds": [1.0] * 9, "step_seconds": [2.0] * 9,
              "evaluations": [{"kind": "budget", "step": 4}, {"kind": "fixed_step", "step": 8},
                              {"kind": "budget", "step": 8}],
              "probe": {"0": {}, "4": {}, "8": {}}, "logged": {"k": {"4": 1, "8": 2, "9": 3}}}
    cut = study_recorder.truncate_to_checkpoint(record, 8)
    # The fixed step 8 ran before checkpoint 8 was written; the budget read at boundary 8 came after it.
    assert cut["evaluations"] == record["evaluations"][:2]
    assert cut["probe"] == {"0": {}, "4": {}} and cut["logged"] == {"k": {"4": 1, "8": 2}}
    assert len(cut["step_cpu_seconds"]) == len(cut["step_seconds"]) == 8


def test_max_visits_sums_a_problems_groups_over_steps():
    per_step = {"0": {"groups_of/3": 2, "groups_of/5": 1, "tokens": 9}, "4": {"groups_of/5": 2}}
    assert study_recorder.max_visits(per_step) == 3
    assert study_recorder.max_visits({}) == 0


def test_every_arm_trains_in_the_methods_layout_and_defaults_are_what_dapoconfig_resolves_to(tmp_path):
    from trl import GRPOTrainer

    from benchmarks.real_model_study3.study import arm_trainer_and_config, layout_config
    from trl_variants import DAPOTrainer
    from trl_variants.dynamic_sampling.options import resolve_sampling_options

    settings = Settings()
    shared = layout_config(settings, seed=3)
    configs = {arm: arm_trainer_and_config(arm, str(tmp_path), shared) for arm in ("grpo", "dapo", "defaults")}
    assert configs["grpo"][0] is GRPOTrainer and configs["dapo"][0] is configs["defaults"][0] is DAPOTrainer
    for _, config in configs.values():
        layout = (config.per_device_train_batch_size, config.num_generations, config.gradient_accumulation_steps,
                  config.steps_per_generation, config.num_iterations, config.max_completion_length)
        assert layout == (16, 8, 1, 4, 1, 32)
        optimizer = (config.learning_rate, config.lr_scheduler_type, config.seed, config.save_steps)
        assert optimizer == (1e-5, "constant", 3, 4)
    assert configs["grpo"][1].epsilon_high is None and configs["dapo"][1].epsilon_high == 0.28
    dapo, defaults = configs["dapo"][1], configs["defaults"][1]
    assert (dapo.skip_degenerate_prompts, dapo.dynamic_sampling_carry_surplus) == (False, False)
    resolved = resolve_sampling_options(True, False, None, 1, 4, 1, False)  # DAPOConfig() in this layout
    assert (defaults.skip_degenerate_prompts, defaults.dynamic_sampling_carry_surplus) == (
        resolved.skip_degenerate_prompts, resolved.carry_surplus) == (False, True)
    with pytest.raises(ValueError, match="--arm 'carry_only' is not an arm of study 3"):
        arm_trainer_and_config("carry_only", str(tmp_path), shared)


def figures(per_token=0.1, greedy=100.0, high=3, truncated=0.0):
    return {"per_token": per_token, "greedy_cpu_seconds": greedy, "sampled_cpu_seconds": greedy,
            "greedy_truncated": truncated, "sampled_truncated": 0.0, "high_steps_nonzero": high, "clip_steps": 8,
            "clip_means": {"clip_ratio/high_mean": 0.01}}


def test_projected_grid_hours_by_hand():
    rows = {arm: figures(per_token=0.05) for arm in ("grpo", "dapo", "defaults")}
    # Per seed: 3 arms x (0.05 x 8,000 + 3 points x 200 s) = 3,000 s; 10 seeds and step 0's 200 s.
    assert study_report.projected_grid_hours(rows, Settings(), 10) == pytest.approx((10 * 3_000 + 200) / 3600)


def test_the_pilot_rules_as_the_method_fixes_them():
    cheap = {arm: figures() for arm in ("grpo", "dapo", "defaults")}
    lines = study_report.pilot_rules(cheap)
    # 10 seeds x 3 arms x (0.1 s x 8,000 tokens + 3 points x 200 s) + step 0: 11.7 hours, on the grid's settings.
    assert "10 seeds would take 11.7 CPU hours" in lines[1]
    assert "it acts" in lines[0] and "runs 10 seeds at margin 0.040" in lines[1] and "no pilot evaluation" in lines[2]
    costly = {**cheap, "dapo": figures(per_token=0.4, high=0, truncated=0.25)}
    lines = study_report.pilot_rules(costly)
    assert "stop and fix it" in lines[0]
    assert "the grid runs 9 seeds and the margin of (1) becomes 0.043" in lines[1]
    assert "`dapo` greedy 0.250" in lines[2]
    assert study_report.pilot_rules({"grpo": figures()})[:2] == [
        "- Clip-higher: open (no complete `dapo` pilot run).", "- Cost: open (not every arm's pilot run is complete)."]


def test_the_committed_report_is_what_the_report_command_prints(capsys):
    from benchmarks.real_model_study3 import study
    from benchmarks.real_model_study3.design import RESULTS_DIR

    study.main(["report"])
    with open(f"{RESULTS_DIR}/report.md", encoding="utf-8") as handle:
        assert capsys.readouterr().out == handle.read()



def test_the_grid_report_reads_only_complete_runs_by_arm_and_seed(tmp_path):
    from benchmarks.real_model_study3.grid_report import load_grid

    runs = (("dapo-seed0", True), ("grpo-seed10", True), ("grpo-seed0", True), ("defaults-seed0", False))
    for name, complete in runs:
        arm, _, seed = name.partition("-seed")
        (tmp_path / f"{name}.json").write_text(json.dumps({"arm": arm, "seed": int(seed), "complete": complete}))
    (tmp_path / "step0.json").write_text(json.dumps({"greedy": {}}))
    assert {arm: sorted(seeds) for arm, seeds in load_grid(str(tmp_path)).items()} == {"dapo": [0], "grpo": [0, 10]}
