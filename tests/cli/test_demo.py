"""`trl-variants demo`: every artifact is written, the policy really improves, and the output folder is never left
half-written."""

import io
import json
import signal
import subprocess
import sys
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_variants.cli import demo, main
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.demo import DEMO_TASK, LOG_FILE, PLOT_FILE, SUMMARY_FILE, check_replaceable, run_demo
from trl_variants.dynamic_sampling.selection import ALL_GROUPS_REWARD_METRIC
from trl_variants.toy import greedy_accuracy
from trl_variants.toy.data import split_problems

from ..helpers import interruptible_popen


def held_out_problems(seed):
    return split_problems(DEMO_TASK["max_operand"], DEMO_TASK["held_out_fraction"], seed)[1]


@pytest.mark.slow
def test_demo_writes_every_artifact_and_replaces_its_earlier_output(tmp_path, capsys):
    output_dir = tmp_path / "demo-output"
    output_dir.mkdir()
    (output_dir / SUMMARY_FILE).write_text("{}")  # an earlier demo output ...
    (output_dir / "stale.txt").write_text("from the earlier run")  # ... whose files must not survive

    assert main(["demo", "--steps", "3", "--seed", "1", "--output_dir", str(output_dir)]) == 0

    stdout = capsys.readouterr().out
    assert "before" in stdout and "after" in stdout and "held-out accuracy (80 problems)" in stdout
    assert "step 3/3: training reward " in stdout  # the progress line of the last step
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo-output"]  # no staging folder left behind
    assert not (output_dir / "stale.txt").exists()

    summary = json.loads((output_dir / SUMMARY_FILE).read_text())
    assert (summary["variant"], summary["seed"], summary["steps"]) == ("dapo", 1, 3)

    log = [json.loads(line) for line in (output_dir / LOG_FILE).read_text().splitlines()]
    assert [record["step"] for record in log] == [1, 2, 3]
    assert all(ALL_GROUPS_REWARD_METRIC in record and "dynamic_sampling/pass_rate" in record for record in log)
    assert log[-1]["held_out_accuracy"] == pytest.approx(summary["held_out_accuracy_after"])

    assert (output_dir / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    card = (output_dir / "README.md").read_text()
    assert "dapo" in card and "trl-variants" in card and "2503.14476" in card
    # The toy policy is built from a config and trained on generated problems: nothing to link on the Hub.
    assert "None" not in card and "huggingface.co/datasets" not in card
    assert "a model built locally from a config (it has no base model on the Hub)" in card
    assert 'model="' + output_dir.name + '"' in card

    # The saved model is the trained one: reloaded, it scores what the summary says on the held-out problems.
    model = AutoModelForCausalLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    reloaded = greedy_accuracy(model, tokenizer, held_out_problems(seed=1))
    assert reloaded == pytest.approx(summary["held_out_accuracy_after"])


@pytest.mark.slow
def test_demo_variant_flag_switches_the_trainer(tmp_path, capsys):
    output_dir = tmp_path / "out"
    assert main(["demo", "--variant", "dr-grpo", "--steps", "2", "--output_dir", str(output_dir)]) == 0
    card = (output_dir / "README.md").read_text()
    assert "dr-grpo" in card and "2503.20783" in card
    log = [json.loads(line) for line in (output_dir / LOG_FILE).read_text().splitlines()]
    assert not any("dynamic_sampling/pass_rate" in record for record in log)


def error_line(capsys) -> str:
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr
    return lines[0]


def test_demo_leaves_an_unrelated_folder_alone(tmp_path, capsys):
    output_dir = tmp_path / "my-project"
    output_dir.mkdir()
    (output_dir / "notes.txt").write_text("keep me")
    assert main(["demo", "--steps", "1", "--output_dir", str(output_dir)]) == 2
    assert "already exists" in error_line(capsys)
    assert (output_dir / "notes.txt").read_text() == "keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["my-project"]


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--variant", "ppo"], "invalid choice: 'ppo'"),
        (["--steps", "0"], "--steps 0"),
        (["--steps", "many"], "invalid int value"),
    ],
)
def test_demo_bad_flags(tmp_path, capsys, flags, expected):
    assert main(["demo", *flags, "--output_dir", str(tmp_path / "out")]) == 2
    assert expected in error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_demo_unwritable_output_dir(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["demo", "--steps", "1", "--output_dir", str(blocker / "out")]) == 2
    assert "output_dir" in error_line(capsys)


def fake_training(outcome):
    """`train_and_write` without the training: writes a file into the staging folder, then returns a summary or
    raises `outcome`."""

    def train_and_write(steps, seed, variant, staging, final, out):
        (staging / "weights.bin").write_text("half")
        if isinstance(outcome, BaseException):
            raise outcome
        return {"held_out_problems": 1, "train_problems": 1, "machine": "m", "output_dir": str(final),
                **dict.fromkeys(["held_out_accuracy_before", "held_out_accuracy_after", "train_accuracy_before",
                                 "train_accuracy_after"], 0.5)}  # fmt: skip

    return train_and_write


def test_the_output_folder_appears_complete_and_replaces_an_earlier_output(tmp_path, monkeypatch):
    final = tmp_path / "result"
    final.mkdir()
    (final / SUMMARY_FILE).write_text("{}")  # an earlier demo output
    (final / "stale.bin").write_text("old")
    monkeypatch.setattr(demo, "train_and_write", fake_training(None))
    summary = run_demo(output_dir=str(final), out=io.StringIO())
    assert sorted(path.name for path in final.iterdir()) == [SUMMARY_FILE, "weights.bin"]
    assert json.loads((final / SUMMARY_FILE).read_text()) == summary  # written last, with the time it took
    assert sorted(path.name for path in tmp_path.iterdir()) == ["result"]


@pytest.mark.parametrize("outcome", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_demo_leaves_nothing_behind(tmp_path, monkeypatch, outcome):
    monkeypatch.setattr(demo, "train_and_write", fake_training(outcome))
    with pytest.raises(type(outcome)):
        run_demo(output_dir=str(tmp_path / "result"), out=io.StringIO())
    assert list(tmp_path.iterdir()) == []


def test_a_folder_the_demo_did_not_write_is_never_replaced(tmp_path):
    """Checked before training and again before the staged folder takes the final name, in case it appeared."""
    final = tmp_path / "result"
    check_replaceable(final)  # absent
    final.mkdir()
    check_replaceable(final)  # empty
    (final / "thesis.tex").write_text("years of work")
    with pytest.raises(CliUsageError, match="already exists"):
        check_replaceable(final)
    assert (final / "thesis.tex").read_text() == "years of work"


@pytest.mark.slow
def test_interrupted_demo_leaves_no_folder_behind(tmp_path):
    """Ctrl-C in the middle of training: exit code 130, and neither the output folder nor its staging folder
    remains."""
    command = [sys.executable, "-m", "trl_variants.cli", "demo", "--output_dir", str(tmp_path / "out")]
    process = interruptible_popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(f".out.partial-*/{LOG_FILE}")):  # training has logged its first step
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []
