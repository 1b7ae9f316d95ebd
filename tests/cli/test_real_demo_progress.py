"""The real demo's progress lines, piece by piece and without the real model: a step's line waits for its
checkpoint (with a notice when saving takes a while), and a long step reports its generation rounds, completions and
phase, counted as the trainer itself counts them (checked on the toy policy, which trains in seconds)."""

import time
from types import SimpleNamespace

import pytest
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.cli import main
from trl_variants.cli.common import REAL_DEMO_SUMMARY_FILE
from trl_variants.real.progress import TRAINING, StepActivity, StepHeartbeat, StepProgress, activity_line

from .errors import one_error_line


def state(step: int, max_steps: int = 3):
    return SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=True)


def test_a_step_line_waits_for_its_checkpoint_and_a_slow_save_is_announced():
    lines = []
    progress = StepProgress(lines.append, checkpoints=True, saving_notice_after=0.05)
    progress.on_train_begin(None, state(0), None)
    progress.on_log(None, state(1), None, logs={"reward": 0.5})
    assert lines == []  # logged, but its checkpoint is not written yet
    time.sleep(0.5)  # a checkpoint slower than the notice's delay
    progress.on_save(None, state(1), None)
    assert lines[0] == "  saving the checkpoint of step 1..."
    assert lines[1].startswith("  step 1/3 (reward 0.50): ") and len(lines) == 2


def test_a_quick_save_prints_only_the_step_line():
    lines = []
    progress = StepProgress(lines.append, checkpoints=True, saving_notice_after=5.0)
    progress.on_log(None, state(2), None, logs={"reward": 1.0})
    progress.on_save(None, state(2), None)
    time.sleep(0.05)
    assert len(lines) == 1 and lines[0].startswith("  step 2/3 (reward 1.00): ")


def test_without_checkpoints_the_line_comes_with_the_log():
    lines = []
    StepProgress(lines.append).on_log(None, state(1), None, logs={"reward": 0.25})
    assert len(lines) == 1 and lines[0].startswith("  step 1/3 (reward 0.25): ")


def test_activity_line():
    activity = StepActivity(phase="scoring completions", rounds=1, completions=48)
    assert activity_line(2, 20, activity, 95) == (
        "  step 2/20 in progress for 1:35: 1 generation round done, 48 completions generated; now scoring completions"
    )
    assert "0 generation rounds done" in activity_line(1, 2, StepActivity(), 31)


def train_watched(trainer_class, config_class, toy_task, tmp_path, **settings):
    lines = []
    heartbeat = StepHeartbeat(lines.append, every=0.01)
    args = config_class(str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                        max_completion_length=4, max_steps=2, use_cpu=True, report_to=[], save_strategy="no",
                        logging_steps=1, seed=0, **settings)  # fmt: skip
    trainer = trainer_class(toy_task.model, toy_task.reward_funcs, args=args, train_dataset=toy_task.train_dataset,
                            processing_class=toy_task.tokenizer, callbacks=[heartbeat])  # fmt: skip
    heartbeat.watch(trainer)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return heartbeat, logs, lines


def test_the_heartbeat_counts_the_rounds_and_completions_dynamic_sampling_logs(toy_task, tmp_path):
    heartbeat, logs, lines = train_watched(DAPOTrainer, DAPOConfig, toy_task, tmp_path)
    assert len(heartbeat.finished) == len(logs) == 2
    for activity, logged in zip(heartbeat.finished, logs, strict=True):
        assert activity.rounds == logged["dynamic_sampling/rounds"]
        assert activity.completions == logged["dynamic_sampling/generated_groups"] * 4
        assert activity.phase == TRAINING
    assert any(" in progress for " in line for line in lines)


def test_the_heartbeat_counts_one_round_per_generation_under_grpo(toy_task, tmp_path):
    heartbeat, logs, _ = train_watched(GRPOTrainer, GRPOConfig, toy_task, tmp_path)
    assert [(activity.rounds, activity.completions) for activity in heartbeat.finished] == [(1, 16), (1, 16)]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_finished_output_folder_is_refused_without_overwrite(tmp_path, capsys, monkeypatch, overwrite):
    finished = tmp_path / "real-demo-output"
    finished.mkdir()
    (finished / REAL_DEMO_SUMMARY_FILE).write_text("{}")
    started = []
    monkeypatch.setattr("trl_variants.cli.real_demo.run_real_demo", lambda **settings: started.append(settings))
    flags = ["real-demo", "--output_dir", str(finished), *(["--overwrite"] if overwrite else [])]
    if overwrite:
        assert main(flags) == 0 and started[0]["overwrite"] is True
    else:
        assert main(flags) == 2 and not started
        assert one_error_line(capsys.readouterr().err) == (
            f"trl-variants: error: output_dir {str(finished)!r} already holds a finished run ({REAL_DEMO_SUMMARY_FILE}); "
            "pass --overwrite to replace it, or another --output_dir."
        )
