"""Dynamic sampling's metrics reach real trackers: a run with `report_to=["tensorboard"]` or `report_to=["trackio"]`
records every `dynamic_sampling/*` value of the trainer's log history, at its step, read back with the tracker's own
reader. TensorBoard is in the `test` extra. Trackio, which Hugging Face maintains, works offline (a local SQLite
file), but is not in the extra: trackio 0.43 requires pillow<13 and pulls a web stack (starlette, uvicorn,
gradio_client), so its test runs where it is installed (`pip install trackio`) and is skipped elsewhere."""

import math

import pytest

from trl_variants import DAPOConfig, DAPOTrainer

REQUIRED = {"dynamic_sampling/rounds", "dynamic_sampling/generated_groups", "dynamic_sampling/reward_all_groups",
            "dynamic_sampling/pass_rate"}  # fmt: skip


def train_reporting_to(tracker: str, toy_task, tmp_path, **settings) -> dict[tuple[int, str], float]:
    """Trains three steps reporting to `tracker`; returns the log history's `dynamic_sampling/*` values by
    (step, name)."""
    args = DAPOConfig(str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4, max_completion_length=4,
                      max_steps=3, use_cpu=True, save_strategy="no", logging_steps=1, seed=0, report_to=[tracker],
                      **settings)  # fmt: skip
    trainer = DAPOTrainer(toy_task.model, toy_task.reward_funcs, args=args, train_dataset=toy_task.train_dataset,
                          processing_class=toy_task.tokenizer)  # fmt: skip
    trainer.train()
    logged = {
        (entry["step"], key): value
        for entry in trainer.state.log_history
        for key, value in entry.items()
        if key.startswith("dynamic_sampling/")
    }
    assert {key for _, key in logged} >= REQUIRED and {step for step, _ in logged} == {1, 2, 3}
    return logged


def assert_tracked(tracked: dict, logged: dict) -> None:
    assert tracked.keys() == logged.keys()
    for key, value in logged.items():  # TensorBoard's event file stores float32
        assert math.isclose(tracked[key], value, rel_tol=1e-6, abs_tol=1e-6), (key, tracked[key], value)


def test_tensorboard_event_file_holds_the_logged_dynamic_sampling_values(toy_task, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason='tensorboard is not installed: pip install ".[test]"')
    from benchmarks.tracker_metrics.tracker_metrics import plot, read_scalars

    logging_dir = tmp_path / "runs"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(logging_dir))  # transformers 5's TensorBoardCallback reads it
    logged = train_reporting_to("tensorboard", toy_task, tmp_path)
    scalars = read_scalars(logging_dir)  # TensorBoard's own reader, as docs/metrics.md's plot is drawn
    tracked = {
        (step, tag): value for tag, events in scalars.items() if tag.startswith("dynamic_sampling/")
        for step, value in events
    }  # fmt: skip
    assert_tracked(tracked, logged)
    plot(scalars, tmp_path / "metrics.png", "toy")
    assert (tmp_path / "metrics.png").stat().st_size > 0


def test_trackio_database_holds_the_logged_dynamic_sampling_values(toy_task, tmp_path, monkeypatch):
    trackio = pytest.importorskip("trackio", reason="trackio is not installed (pip install trackio)")
    # trackio reads TRACKIO_DIR once, when TRL first imports it; its storage keeps the folder in these constants.
    for module in (trackio.utils, trackio.sqlite_storage):
        monkeypatch.setattr(module, "TRACKIO_DIR", tmp_path / "trackio")
    project = f"trl-variants-{tmp_path.name}"
    logged = train_reporting_to("trackio", toy_task, tmp_path, project=project, run_name="toy")
    tracked = {
        (entry["step"], key.removeprefix("train/")): value
        for entry in trackio.SQLiteStorage.get_logs(project, "toy")
        for key, value in entry.items()
        if key.startswith("train/dynamic_sampling/")
    }
    assert (tmp_path / "trackio").is_dir()
    assert_tracked(tracked, logged)
