"""examples/real_model_demo.py shows its progress and keeps its work: a line per training step and per evaluation
batch with the time elapsed and left, a line every 30 s while a step or a batch is under way, and an interrupt that
keeps the finished steps, their log and the way to resume, from which the same command finishes with the results of
a run never stopped.

Its own code path runs on a tiny chat model built from a config in the real model's place (tests/tiny_chat_model.py);
tests/real_model/test_commands.py runs it on the real one."""

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from trl_variants import DAPOConfig, DAPOTrainer

from .helpers import EXAMPLES, interruptible_popen, load_example
from .tiny_chat_model import tiny_chat_model, use_tiny_chat_model

pytest.importorskip("reasoning_gym", reason='reasoning-gym is not installed: pip install ".[reasoning-gym]"')

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "cli" / "scripts" / "real_model_demo_on_a_tiny_model.py"
SMALL = {"held_out_prompts": 3, "samples_per_prompt": 2, "threads": 1}
SMALL_FLAGS = ["--held_out_prompts", "3", "--samples_per_prompt", "2", "--threads", "1"]
# What differs between two runs of the same settings: clocks, and where the output went.
TIMING_KEYS = {"step_time", "elapsed_seconds", "train_seconds", "seconds_per_step", "seconds", "output_dir"}
example = load_example("real_model_demo")
LOG_FILE, SUMMARY_FILE, BEFORE_FILE = example.LOG_FILE, example.SUMMARY_FILE, example.BEFORE_FILE


@pytest.fixture
def tiny_model(monkeypatch):
    use_tiny_chat_model(example, monkeypatch.setattr)


class InterruptOnLine(io.StringIO):
    """The demo's output stream, raising KeyboardInterrupt (as Ctrl-C would) when the line containing `text` is
    printed: a deterministic interrupt at a chosen point of the run."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def write(self, line):
        written = super().write(line)
        if self.text is not None and self.text in line:
            self.text = None
            raise KeyboardInterrupt
        return written


def without_timing(value):
    if isinstance(value, dict):
        return {key: without_timing(item) for key, item in value.items() if key not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timing(item) for item in value]
    return value


def finished_run(output_dir: Path) -> tuple[dict, list[dict], dict]:
    """The summary and the log without their clocks, and the trained weights."""
    summary = json.loads((output_dir / SUMMARY_FILE).read_text())
    log = [json.loads(line) for line in (output_dir / LOG_FILE).read_text().splitlines()]
    return without_timing(summary), without_timing(log), load_file(output_dir / "model.safetensors")


def assert_same_run(actual: Path, expected: Path):
    actual_summary, actual_log, actual_weights = finished_run(actual)
    expected_summary, expected_log, expected_weights = finished_run(expected)
    assert actual_summary == expected_summary
    assert [record["step"] for record in actual_log] == [record["step"] for record in expected_log]
    assert actual_log == expected_log
    assert actual_weights.keys() == expected_weights.keys()
    assert all(torch.equal(actual_weights[name], expected_weights[name]) for name in expected_weights)


# Progress lines, without a model.


def test_clock_reads_minutes_and_hours():
    assert [example.clock(seconds) for seconds in (0, 59.4, 61, 3599, 3600, 37 * 60 * 2 + 5)] == [
        "0:00", "0:59", "1:01", "59:59", "1:00:00", "1:14:05",
    ]  # fmt: skip


def test_progress_line_estimates_the_time_left_from_this_sittings_pace():
    assert example.progress_line("step", 0, 20, 3) == "  step 0/20: 0:03 elapsed"
    assert example.progress_line("step", 2, 20, 80, details=" (reward 0.25)") == (
        "  step 2/20 (reward 0.25): 1:20 elapsed, about 12:00 left"
    )
    # Resumed at step 10: two steps in 80 s this sitting, eight to go.
    assert example.progress_line("step", 12, 20, 80, done_at_start=10) == "  step 12/20: 1:20 elapsed, about 5:20 left"
    assert example.progress_line("step", 20, 20, 800) == "  step 20/20: 13:20 elapsed, done"


# The work kept between sittings, without a model.


def test_an_interrupted_log_is_cut_back_to_the_last_complete_checkpoint(tmp_path):
    log = tmp_path / LOG_FILE
    # Step 3 was logged before its checkpoint was written; step 4's line was cut short.
    log.write_text("".join(json.dumps({"step": step, "loss": step / 10}) + "\n" for step in (1, 2, 3)) + '{"step": 4')
    assert example.step_of(str(tmp_path / "checkpoint-2")) == 2
    assert [record["step"] for record in example.kept_log(log, 2)] == [1, 2]
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]
    log.write_text('{"step": 1\n{"step": 2}\n')
    with pytest.raises(example.UsageError, match="line 1 is not JSON"):
        example.kept_log(log, 2)


def test_an_unfinished_run_of_other_settings_is_refused(tmp_path):
    settings = {"steps": 20, "seed": 0, "task_config": None}
    work, resuming = example.work_folder(tmp_path / "out", settings, overwrite=False)
    assert not resuming and work == tmp_path / "out.partial"
    with pytest.raises(example.UsageError, match=r"holds an unfinished run with other settings \(--seed 0, not 1\)"):
        example.work_folder(tmp_path / "out", {**settings, "seed": 1}, overwrite=False)
    assert example.work_folder(tmp_path / "out", settings, overwrite=False) == (work, True)
    (tmp_path / "other.partial").mkdir()
    with pytest.raises(example.UsageError, match="exists but holds no unfinished run"):
        example.work_folder(tmp_path / "other", settings, overwrite=False)


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_finished_output_folder_is_refused_without_overwrite(tmp_path, overwrite):
    finished = tmp_path / "real-model-output"
    finished.mkdir()
    (finished / SUMMARY_FILE).write_text("{}")
    if overwrite:
        assert example.work_folder(finished, {}, overwrite=True) == (tmp_path / "real-model-output.partial", False)
    else:
        with pytest.raises(example.UsageError) as error:
            example.work_folder(finished, {}, overwrite=False)
        assert str(error.value) == (f"output_dir {str(finished)!r} already holds a finished run ({SUMMARY_FILE}); "
                                    "pass --overwrite to replace it, or another --output_dir.")


def test_bad_flags_get_one_line(capsys):
    for flags, expected in ((["--held_out_prompts", "0"], "--held_out_prompts 0 is not allowed; expected an integer >= 1"),
                            (["--task_config", "{oops"], "argument --task_config: '{oops' is not JSON"),
                            (["--variant", "ppo"], "argument --variant: invalid choice: 'ppo'")):
        with pytest.raises(SystemExit) as exit_info:
            example.main(flags)
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert expected in error, error


def state(step: int, max_steps: int = 3):
    return SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=True)


def test_a_step_line_waits_for_its_checkpoint_and_goes_to_the_log(tmp_path):
    lines = []
    progress = example.Progress(lines.append, tmp_path / LOG_FILE, earlier=[{"step": 1, "elapsed_seconds": 10.0}])
    progress.on_train_begin(None, state(1), None)
    progress.on_log(None, state(2), None, logs={"reward": 0.5, "loss": 0.1})
    assert lines == []  # logged, but its checkpoint is not written yet
    progress.on_save(None, state(2), None)
    assert len(lines) == 1 and lines[0].startswith("  step 2/3 (reward 0.50): ") and lines[0].endswith(" left")
    (record,) = [json.loads(line) for line in (tmp_path / LOG_FILE).read_text().splitlines()]
    assert record["step"] == 2 and record["elapsed_seconds"] >= 10.0  # the earlier sitting's seconds continue


def test_a_long_step_reports_that_it_is_under_way(toy_task, tmp_path):
    lines = []
    progress = example.Progress(lines.append, tmp_path / LOG_FILE, earlier=[], every=0.01)
    args = DAPOConfig(str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=4, max_steps=2, use_cpu=True, report_to=[], save_strategy="steps",
                      save_steps=1, logging_steps=1, seed=0)  # fmt: skip
    DAPOTrainer(toy_task.model, toy_task.reward_funcs, args=args, train_dataset=toy_task.train_dataset,
                processing_class=toy_task.tokenizer, callbacks=[progress]).train()  # fmt: skip
    assert any(line.startswith("  step 1/2 in progress for ") for line in lines), lines
    assert [line.split(" (")[0] for line in lines if " elapsed" in line] == ["  step 1/2", "  step 2/2"]
    assert len((tmp_path / LOG_FILE).read_text().splitlines()) == 2


def test_an_evaluation_batch_under_way_is_never_silent_longer_than_the_heartbeat():
    """The real model's evaluation batches take minutes on a CPU: while one runs, a line comes every `every` seconds,
    where the batch lines alone would leave the whole batch silent. Here one batch of the tiny model is slowed to
    several heartbeats."""
    model, tokenizer = tiny_chat_model()
    generate, batch_seconds, every = model.generate, 1.5, 0.2

    def slow_generate(**kwargs):
        time.sleep(batch_seconds)
        return generate(**kwargs)

    model.generate = slow_generate
    held_out = example.make_held_out(prompts=3)
    config = SimpleNamespace(max_completion_length=4, temperature=1.0)
    lines = []
    started = time.perf_counter()
    result = example.evaluate(model, tokenizer, held_out, 2, config, 0, "before training:",
                              lambda line: lines.append((time.perf_counter(), line)), every=every)  # fmt: skip
    finished = time.perf_counter()
    time.sleep(3 * every)  # the heartbeat stopped with the evaluation
    assert result.prompts == 3 and result.samples_per_prompt == 2
    texts = [line for _, line in lines]
    assert texts[-1].startswith("  before training: 6/6 samples: ") and texts[-1].endswith(", done"), texts
    under_way = [line for line in texts if line.startswith("  before training: 0/6 samples, a batch under way: ")]
    assert len(under_way) >= 3 and len(under_way) == len(texts) - 1, texts
    stamps = [started, *(stamp for stamp, _ in lines), finished]
    assert max(later - earlier for earlier, later in zip(stamps, stamps[1:])) < 3 * every, texts


def test_the_partial_folder_is_ignored_by_git():
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("real-model-output.partial/checkpoint-3/model.safetensors", "real-model-output/model.safetensors",
                 ".demo-output.partial-x1y2/training_log.jsonl"):  # fmt: skip
        checked = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO_ROOT)
        assert checked.returncode == 0, f"{path} is not ignored"


# The command's path on the tiny model.


@pytest.mark.slow
def test_progress_lines_for_both_evaluations_and_every_step(tiny_model, tmp_path, capsys):
    assert example.main(["--steps", "2", "--output_dir", str(tmp_path / "out"), *SMALL_FLAGS]) == 0
    printed = capsys.readouterr().out
    for line in ("before training: 6/6 samples: ", "step 1/2 (reward ", "step 2/2 (reward ",
                 "after training: 6/6 samples: "):  # fmt: skip
        assert line in printed, printed
    step_one = next(line for line in printed.splitlines() if "step 1/2" in line)
    assert step_one.endswith(" left") and " elapsed, about " in step_one
    # The finished folder holds the output only: the checkpoints and the kept evaluation are gone.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    written = {path.name for path in (tmp_path / "out").iterdir()}
    assert {SUMMARY_FILE, LOG_FILE, "model.safetensors", "README.md"} <= written
    assert not [name for name in written if name.startswith("checkpoint") or name == BEFORE_FILE]


@pytest.mark.slow
@pytest.mark.parametrize(
    "interrupt_at, kept",
    [
        # The line of step 3 is printed once step 3's checkpoint is complete: steps 1-3 are kept.
        ("step 3/4", "steps 1-3 of 4 kept, with the log and the checkpoint of step 3, in "),
        ("step 1/4", "step 1 of 4 kept, with the log and the checkpoint of step 1, in "),
        # During the evaluation after training: every step is kept, and the resumed run only evaluates and saves.
        ("Held-out pass rate after training", "all 4 steps kept, with the log and the last checkpoint, in "),
    ],
)
def test_an_interrupt_keeps_the_work_and_the_same_command_finishes_it_exactly(
    tiny_model, tmp_path, interrupt_at, kept
):
    run = dict(steps=4, **SMALL)
    example.run(output_dir=str(tmp_path / "uninterrupted"), out=io.StringIO(), **run)

    output_dir = tmp_path / "resumed"
    interrupted = InterruptOnLine(interrupt_at)
    with pytest.raises(KeyboardInterrupt):
        example.run(output_dir=str(output_dir), out=interrupted, command="the command", **run)
    printed = interrupted.getvalue()
    assert f"Interrupted: {kept}{output_dir}.partial/" in printed
    assert f"To resume, run the same command again from {os.getcwd()}:\n  the command" in printed
    assert not output_dir.exists()
    logged = [json.loads(line)["step"] for line in (tmp_path / "resumed.partial" / LOG_FILE).read_text().splitlines()]
    assert logged[:1] == [1]

    resumed = io.StringIO()
    example.run(output_dir=str(output_dir), out=resumed, **run)
    assert "kept from an earlier sitting" in resumed.getvalue()
    assert "  before training: " not in resumed.getvalue()  # the evaluation before training is not measured again
    assert sorted(path.name for path in tmp_path.iterdir()) == ["resumed", "uninterrupted"]
    assert_same_run(output_dir, tmp_path / "uninterrupted")


@pytest.mark.slow
def test_ctrl_c_exits_with_130_and_prints_the_command_that_resumes(tiny_model, tmp_path, monkeypatch):
    """A real SIGINT to the command's process, then the printed command, run as printed, finishes the run."""
    flags = ["--steps", "6", "--output_dir", "out", *SMALL_FLAGS]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    process = interruptible_popen([sys.executable, str(SCRIPT), *flags], cwd=tmp_path, env=environment,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while not (tmp_path / "out.partial" / "checkpoint-2" / "trainer_state.json").is_file():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "real_model_demo.py: interrupted" in stderr
    (command,) = [line.strip() for line in stdout.splitlines() if line.startswith("  python ")]
    assert f"To resume, run the same command again from {tmp_path}:\n  {command}\n" in stdout
    python, script, *words = shlex.split(command)
    assert (tmp_path / script).resolve() == EXAMPLES / "real_model_demo.py" and words == flags
    (kept,) = [line for line in stdout.splitlines() if line.startswith("Interrupted: steps 1-")]
    assert kept.endswith(f", in {tmp_path / 'out.partial'}/.")
    assert (tmp_path / "out.partial" / LOG_FILE).is_file()

    monkeypatch.chdir(tmp_path)
    use_tiny_chat_model(example, monkeypatch.setattr)
    assert example.main(words) == 0
    log = [json.loads(line)["step"] for line in (tmp_path / "out" / LOG_FILE).read_text().splitlines()]
    assert log == [1, 2, 3, 4, 5, 6]


# What the example says about itself.


def example_help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(["--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_one_duration_in_the_example_and_docs():
    """The example's docstring and docs/cli.md give the same duration, for the same machine."""
    docstring = " ".join(example.__doc__.split())
    duration = docstring.split("# ", 1)[1].split(" python ", 1)[0].strip()
    assert duration.startswith("about ") and "minutes on" in duration
    assert duration in " ".join((REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())


def test_flag_defaults_in_docs_are_the_help_texts(capsys):
    """docs/cli.md's table of the example's flags says what `--help` says of each flag's default."""
    help_text = example_help(capsys)
    page = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("## The real-model example", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `--")]
    checked = 0
    for flag_cell, default_cell, *_ in rows:
        flag = flag_cell.strip("| `")
        if "," in flag:  # a row for two flags
            continue
        flag_help = help_text.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert default_cell.replace("`", "") in flag_help, (flag, default_cell, flag_help)
        checked += 1
    assert checked >= 7
