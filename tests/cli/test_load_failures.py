"""Every way the model, tokenizer, dataset or dataset config can fail to load is one line and exit code 2, with the
Hub offline. A few cases run the installed `trl-variants` console script in a real process, where nothing else can
reach its stderr; the rest call the same entry point in this process (each real process spends seconds importing
torch and TRL) and capture the file descriptors, so library output written to them is seen too."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from trl_variants.cli import main
from trl_variants.toy import build_char_tokenizer, build_tiny_model

from .errors import one_error_line

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("load_failures")
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    model.save_pretrained(root / "model_without_tokenizer")
    (root / "empty").mkdir()
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    return root


def command_prefix() -> list[str]:
    script = shutil.which("trl-variants")
    return [script] if script else [sys.executable, "-m", "trl_variants.cli"]


def run_cli(cwd, *flags, **env_overrides):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", **env_overrides}
    return subprocess.run(
        [*command_prefix(), "dapo", *flags], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def run_in_process(capfd, monkeypatch, cwd, *flags):
    monkeypatch.chdir(cwd)
    capfd.readouterr()
    try:
        returncode = main(["dapo", *flags])
    except SystemExit as exit_info:
        returncode = exit_info.code
    return SimpleNamespace(returncode=returncode, stderr=capfd.readouterr().err)


def exit_2_error_line(result) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    return one_error_line(result.stderr)


def flags(model="model", dataset="data", *extra):
    return [
        "--model_name_or_path", model, "--dataset_name", dataset, "--reward_funcs", "dapo_accuracy",
        "--output_dir", "out", "--report_to", "none", "--use_cpu", "true", *extra,
    ]  # fmt: skip


CASES = {
    "relative model path": (
        flags(model="./no-such-model"),
        ["--model_name_or_path='./no-such-model'", "does not exist"],
    ),
    "absolute model path": (
        flags(model="/no/such/model"),
        ["--model_name_or_path='/no/such/model'", "does not exist"],
    ),
    "folder without model files": (
        flags(model="empty"),
        ["--model_name_or_path='empty'", "config.json"],
    ),
    "folder without tokenizer": (
        flags(model="model_without_tokenizer"),
        ["--model_name_or_path='model_without_tokenizer'", "has no tokenizer"],
    ),
    "model name not cached, Hub offline": (
        flags(model="nobody-x/no-such-model"),
        ["'nobody-x/no-such-model'", "HF_HUB_OFFLINE=1", "hf download"],
    ),
    "invalid model name": (
        flags(model="bad name!"),
        ["'bad name!'", "not a valid Hub model id"],
    ),
    "relative dataset path": (
        flags(dataset="./no-such-data"),
        ["--dataset_name='./no-such-data'", "no such file or folder"],
    ),
    "absolute dataset path": (
        flags(dataset="/no/such/data"),
        ["--dataset_name='/no/such/data'", "no such file or folder"],
    ),
    "dataset name not cached, Hub offline": (
        flags(dataset="nobody-x/no-such-data"),
        ["'nobody-x/no-such-data'", "HF_HUB_OFFLINE=1", "--repo-type dataset"],
    ),
    "folder without data files": (
        flags(dataset="empty"),
        ["--dataset_name='empty'", "doesn't contain any data files"],
    ),
    "dataset config of a local folder": (
        flags("model", "data", "--dataset_config", "main"),
        ["--dataset_config='main'", "'default'", "--dataset_config none"],
    ),
    "wrong split": (
        flags("model", "data", "--dataset_train_split", "training"),
        ["--dataset_train_split='training'", "['train']"],
    ),
}


# One model and one dataset failure that go deepest into loading, run as a user runs them.
IN_A_REAL_PROCESS = {"folder without tokenizer", "wrong split"}


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=pytest.mark.slow) if case in IN_A_REAL_PROCESS else case for case in CASES]
)
def test_load_failure_is_one_line_and_exit_2(files, case, capfd, monkeypatch):
    argv, expected = CASES[case]
    if case in IN_A_REAL_PROCESS:
        result = run_cli(files, *argv)
    else:
        result = run_in_process(capfd, monkeypatch, files, *argv)
    line = exit_2_error_line(result)
    assert all(fragment in line for fragment in expected), line
    assert not (files / "out").exists()


def test_prompt_column_of_numbers_is_one_line_and_exit_2(files, capfd, monkeypatch):
    (files / "numbers").mkdir(exist_ok=True)
    (files / "numbers" / "train.jsonl").write_text(json.dumps({"question": 12, "answer": "2"}) + "\n")
    result = run_in_process(capfd, monkeypatch, files, *flags("model", "numbers", "--prompt_column", "question"))
    line = exit_2_error_line(result)
    assert "column 'prompt' holds values of type int64; expected text (str) or a conversation" in line
    assert not (files / "out").exists()


@pytest.mark.parametrize("flag_index, name", [(1, "nobody-x/no-such-model"), (3, "nobody-x/no-such-data")])
@pytest.mark.slow
def test_hub_name_with_the_hub_unreachable_fails_at_once(files, flag_index, name):
    """Online mode, but the Hub endpoint refuses connections (a closed local port): one line naming the flag and
    the way out, instead of retries and a traceback."""
    argv = flags()
    argv[flag_index] = name
    started = time.monotonic()
    result = run_cli(files, *argv, HF_HUB_OFFLINE="0", HF_ENDPOINT="http://127.0.0.1:9")
    line = exit_2_error_line(result)
    assert f"={name!r}" in line and "the Hub could not be reached" in line and "HF_HUB_OFFLINE=1" in line
    assert time.monotonic() - started < 60
