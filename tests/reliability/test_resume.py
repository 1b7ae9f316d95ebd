"""Interrupted runs resume from their last complete checkpoint and continue exactly as if never stopped."""

import copy
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer
from trl_variants.dynamic_sampling.checkpoint import CARRIED_FILE, MANIFEST_FILE, STATE_FILE
from trl_variants.reliability.checkpoints import (
    JIT_INCOMPLETE_MARKER,
    checkpoint_problems,
    last_complete_checkpoint,
)
from trl_variants.toy import make_toy_task

from ..helpers import toy_config, toy_trainer
from .scripts.train_until_terminated import TERMINATED_RUN_SETTINGS

SCRIPTS = os.path.join(os.path.dirname(__file__), "scripts")
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
CHECKPOINTED = dict(max_steps=5, save_strategy="steps", save_steps=2)


@pytest.fixture(scope="module")
def base_task():
    return make_toy_task(seed=0)


@pytest.fixture
def fresh_task(base_task):
    """Returns a factory: each run starts from its own copy of the same warm-started policy."""
    return lambda: dataclasses.replace(base_task, model=copy.deepcopy(base_task.model))


class InterruptAtStep(TrainerCallback):
    """Stands in for Ctrl-C: raises KeyboardInterrupt once `step` has been trained, before it is logged or saved."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def logged_steps(trainer) -> dict[int, dict]:
    return {
        entry["step"]: {key: value for key, value in entry.items() if key not in TIMING_KEYS}
        for entry in trainer.state.log_history
        if "loss" in entry
    }


RESUME_CASES = {
    # 80 prompts, 4 per step: the resume stays in the first epoch.
    "dapo": (DAPOTrainer, DAPOConfig, None),
    "dr-grpo": (DrGRPOTrainer, DrGRPOConfig, None),
    # 12 prompts, 3 steps per epoch: the resume starts in the second epoch, where TRL's sampler alone would
    # replay the first epoch's order.
    "dr-grpo-second-epoch": (DrGRPOTrainer, DrGRPOConfig, 12),
    # 3 prompts, fewer than one batch: the cycled dataset makes every step an epoch.
    "dapo-cycled-small-dataset": (DAPOTrainer, DAPOConfig, 3),
}


@pytest.mark.parametrize("case", RESUME_CASES)
@pytest.mark.slow
def test_keyboard_interrupt_then_resume_matches_an_uninterrupted_run(fresh_task, tmp_path, case):
    trainer_class, config_class, dataset_size = RESUME_CASES[case]
    settings = dict(max_steps=7, save_strategy="steps", save_steps=2)

    def trainer_for(output_dir, **kwargs):
        task = fresh_task()
        if dataset_size is not None:
            task = dataclasses.replace(task, train_dataset=task.train_dataset.select(range(dataset_size)))
        return toy_trainer(trainer_class, toy_config(config_class, output_dir, **settings), task, **kwargs)

    uninterrupted = trainer_for(tmp_path / "full")
    uninterrupted.train()

    output_dir = tmp_path / "interrupted"
    interrupted = trainer_for(output_dir, callbacks=[InterruptAtStep(5)])
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    saved = sorted(name for name in os.listdir(output_dir) if name.startswith("checkpoint"))
    assert saved == ["checkpoint-2", "checkpoint-4"]
    if trainer_class is DAPOTrainer:
        state = json.loads((output_dir / "checkpoint-4" / STATE_FILE).read_text())
        assert state["refill_sampler"]["position"] > 0 and state["pass_rate_estimate"] is not None

    resumed = trainer_for(output_dir)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 7

    expected, actual = logged_steps(uninterrupted), logged_steps(resumed)
    assert sorted(actual) == list(range(1, 8))
    # Exact equality on CPU: model, optimizer, scheduler, RNG, data order and dynamic-sampling state are restored.
    for step in (5, 6, 7):
        assert actual[step] == expected[step], f"step {step} differs after the resume"
    if trainer_class is DAPOTrainer:
        # Refill rounds ran after the resume, so the restored refill sampler and pass rate mattered.
        assert any(actual[step]["dynamic_sampling/generated_groups"] > 4 for step in (5, 6, 7))


class CrashWhileSaving(DAPOTrainer):
    """A DAPO trainer whose save at step 4 stops midway, like a run killed while writing a checkpoint."""

    crash_in = "rng_state"

    def _save_rng_state(self, output_dir):
        if self.state.global_step == 4 and self.crash_in == "rng_state":
            raise KeyboardInterrupt
        super()._save_rng_state(output_dir)

    def setup_dynamic_sampling(self):
        super().setup_dynamic_sampling()
        calls = self.dynamic_sampler.calls
        learned = calls.learned_rows_per_call

        def crashing_learned_rows_per_call():
            # The first thing the sampler's save reads: nothing of the checkpoint is written yet.
            if self.state.global_step == 4 and self.crash_in == "dynamic_sampling_state":
                raise KeyboardInterrupt
            return learned()

        calls.learned_rows_per_call = crashing_learned_rows_per_call


@pytest.mark.parametrize(
    "crash_in, model_written",
    [
        # transformers has written the model and optimizer but not yet trainer_state.json.
        ("rng_state", True),
        # DAPO writes its own state first, so transformers has written nothing yet.
        ("dynamic_sampling_state", False),
    ],
)
@pytest.mark.slow
def test_a_half_written_checkpoint_is_never_resumed_from(fresh_task, tmp_path, crash_in, model_written):
    problem = "trainer_state.json is missing"
    config = toy_config(DAPOConfig, tmp_path, **CHECKPOINTED)
    crashing = toy_trainer(CrashWhileSaving, config, fresh_task())
    crashing.crash_in = crash_in
    with pytest.raises(KeyboardInterrupt):
        crashing.train()
    half_written, complete = str(tmp_path / "checkpoint-4"), str(tmp_path / "checkpoint-2")
    assert os.path.isdir(half_written)
    assert os.path.isfile(os.path.join(half_written, "model.safetensors")) == model_written
    # transformers would resume from the half-written folder: it only looks at folder names.
    assert get_last_checkpoint(str(tmp_path)) == half_written
    assert checkpoint_problems(half_written) == [problem]
    assert last_complete_checkpoint(str(tmp_path)) == complete

    explicit = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path, **CHECKPOINTED), fresh_task())
    expected = rf"is incomplete \({problem}\).*latest complete checkpoint next to it is '{complete}'"
    with pytest.raises(ValueError, match=expected):
        explicit.train(resume_from_checkpoint=half_written)
    assert explicit.state.global_step == 0

    resumed = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path, **CHECKPOINTED), fresh_task())
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 5
    assert [step for step in logged_steps(resumed) if step > 2] == [3, 4, 5]
    # The run rewrote checkpoint-4 in full on its way to step 5.
    assert checkpoint_problems(half_written) == []
    assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-5")


def test_checkpoint_problems_reads_markers_and_broken_state(tmp_path, fresh_task):
    config = toy_config(DAPOConfig, tmp_path / "run", max_steps=1, save_strategy="steps", save_steps=1)
    toy_trainer(DAPOTrainer, config, fresh_task()).train()
    complete = tmp_path / "run" / "checkpoint-1"
    assert checkpoint_problems(str(complete)) == []

    with_marker = tmp_path / "run" / "checkpoint-2"
    shutil.copytree(complete, with_marker)
    (with_marker / JIT_INCOMPLETE_MARKER).write_text("in progress")
    assert checkpoint_problems(str(with_marker)) == [f"it still holds transformers' {JIT_INCOMPLETE_MARKER} marker"]

    truncated = tmp_path / "run" / "checkpoint-3"
    shutil.copytree(complete, truncated)
    state_text = (truncated / "trainer_state.json").read_text()
    (truncated / "trainer_state.json").write_text(state_text[: len(state_text) // 2])
    assert checkpoint_problems(str(truncated))[0].startswith("trainer_state.json is not valid JSON")
    assert last_complete_checkpoint(str(tmp_path / "run")) == str(complete)

    (tmp_path / "empty").mkdir()
    nothing = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path / "empty", max_steps=1), fresh_task())
    with pytest.raises(ValueError, match=r"resume_from_checkpoint=True found no complete checkpoint in output_dir="):
        nothing.train(resume_from_checkpoint=True)


def test_a_checkpoint_needs_the_files_its_manifest_lists_and_an_old_one_those_its_metrics_imply(tmp_path, fresh_task):
    """The manifest, not the metric names, says which dynamic-sampling files a checkpoint needs; a checkpoint
    written before manifests existed is checked by its metrics as before, and still resumed from."""
    checkpointed = dict(max_steps=2, save_strategy="steps", save_steps=1, dynamic_sampling_carry_surplus=True)
    toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path, **checkpointed), fresh_task()).train()
    new, old = tmp_path / "checkpoint-2", tmp_path / "checkpoint-1"
    assert json.loads((new / MANIFEST_FILE).read_text()) == {"files": [STATE_FILE, CARRIED_FILE]}
    assert checkpoint_problems(str(new)) == []
    (new / CARRIED_FILE).unlink()
    assert checkpoint_problems(str(new)) == [f"{CARRIED_FILE} is missing although {MANIFEST_FILE} lists it"]
    (new / MANIFEST_FILE).write_text(json.dumps({"files": []}))  # the run logged carrying metrics, yet none needed
    assert checkpoint_problems(str(new)) == []
    (new / MANIFEST_FILE).write_text("{")
    assert checkpoint_problems(str(new))[0].startswith(f"{MANIFEST_FILE} is not valid (JSONDecodeError")

    (old / MANIFEST_FILE).unlink()
    assert checkpoint_problems(str(old)) == []
    stateless = tmp_path / "checkpoint-0"
    shutil.copytree(old, stateless)
    (stateless / STATE_FILE).unlink()
    assert checkpoint_problems(str(stateless)) == [f"{STATE_FILE} is missing although the run used dynamic sampling"]
    shutil.rmtree(stateless)
    assert last_complete_checkpoint(str(tmp_path)) == str(old)  # checkpoint-2's manifest is broken
    config = toy_config(DAPOConfig, tmp_path, **{**checkpointed, "max_steps": 3})
    resumed = toy_trainer(DAPOTrainer, config, fresh_task())
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3 and checkpoint_problems(str(new)) == []


@pytest.mark.slow
def test_sigterm_then_resume_continues_from_the_last_complete_checkpoint(tmp_path, base_task):
    output_dir = tmp_path / "run"
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, "train_until_terminated.py"), str(output_dir)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while last_complete_checkpoint(str(output_dir)) is None:
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 90 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        # transformers installs no SIGTERM handler unless enable_jit_checkpoint=True: the process ends at once.
        assert process.wait(timeout=10) == -signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()

    # The signal may have landed in the middle of a save; the resume must use the last complete checkpoint.
    checkpoint = last_complete_checkpoint(str(output_dir))
    saved_step = int(checkpoint.rsplit("-", 1)[1])
    settings = {**TERMINATED_RUN_SETTINGS, "max_steps": saved_step + 2, "save_strategy": "no"}
    task = dataclasses.replace(base_task, model=copy.deepcopy(base_task.model))
    resumed = toy_trainer(DAPOTrainer, DAPOConfig(str(output_dir), **settings), task)
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == saved_step + 2
    assert [step for step in logged_steps(resumed) if step > saved_step] == [saved_step + 1, saved_step + 2]
