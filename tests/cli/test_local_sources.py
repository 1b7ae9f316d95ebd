"""Local model folders and data files named on the command line are checked as the run starts, before a model is
loaded (`train.run_training`): each mistake is one line naming the flag, the value and what was expected. The demos'
option mistakes and a mistyped command are still answered before torch, transformers or TRL load."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest

from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.launch import accelerate_launch_options
from trl_variants.cli.train import load_splits, prepare_split, run_training

from .errors import one_error_line

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY_MODULES = {"torch", "transformers", "trl", "datasets", "accelerate"}
RECORDS = [{"question": "1+1", "answer": "2"}, {"question": "2+3", "answer": "5"}]


def write_data_file(path, records=RECORDS):
    """`records` in the format `path`'s suffix names."""
    suffix = path.suffix
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    elif suffix == ".json":
        path.write_text(json.dumps(records, indent=2))
    elif suffix in (".csv", ".tsv"):
        separator = "\t" if suffix == ".tsv" else ","
        keys = list(records[0])
        lines = [separator.join(keys)] + [separator.join(str(record[key]) for key in keys) for record in records]
        path.write_text("\n".join(lines) + "\n")
    elif suffix == ".parquet":
        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(records), path)
    return path


def model_folder(tmp_path):
    """A folder the source check takes for a model: it looks at file names only, so empty files do."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).touch()
    return folder


def flags(tmp_path, model, dataset, *extra) -> list[str]:
    return ["--model_name_or_path", str(model), "--dataset_name", str(dataset), "--reward_funcs", "dapo_accuracy",
            "--output_dir", str(tmp_path / "out"), "--use_cpu", "true", "--bf16", "false", *extra]  # fmt: skip


def full_run_message(argv) -> str | None:
    """The message of the full run, which parses, then checks the model folder and loads the dataset with
    `datasets`; every mistake here stops it before a model is loaded."""
    try:
        run_training(VARIANTS["dapo"], parse_command(VARIANTS["dapo"], argv, accelerate_launch_options()))
    except CliUsageError as error:
        return str(error)
    return None


MISTAKES = {
    "missing data file": lambda tmp_path: flags(tmp_path, model_folder(tmp_path), tmp_path / "no-such.jsonl"),
    "missing data folder": lambda tmp_path: flags(tmp_path, model_folder(tmp_path), "./no-such-folder/"),
    "missing model folder": lambda tmp_path: flags(tmp_path, tmp_path / "no-model", "openai/gsm8k"),
    "no dataset": lambda tmp_path: flags(tmp_path, model_folder(tmp_path), "x")[:2] + flags(tmp_path, "m", "x")[4:],
    "model folder without weights": lambda tmp_path: flags(tmp_path, tmp_path, "openai/gsm8k"),
    "missing reward model folder": lambda tmp_path: flags(
        tmp_path, model_folder(tmp_path), "openai/gsm8k", "--reward_model_name_or_path", "./no-reward-model"
    ),
    **{
        f"{suffix} without a prompt column": (
            lambda tmp_path, suffix=suffix: flags(
                tmp_path, model_folder(tmp_path), write_data_file(tmp_path / f"data{suffix}")
            )
        )
        for suffix in (".jsonl", ".json", ".csv", ".tsv", ".parquet")
    },
    "misnamed prompt column": lambda tmp_path: flags(
        tmp_path, model_folder(tmp_path), write_data_file(tmp_path / "data.jsonl"), "--prompt_column", "questoin"
    ),
    "misnamed solution column": lambda tmp_path: flags(
        tmp_path, model_folder(tmp_path), write_data_file(tmp_path / "data.parquet"),
        "--prompt_column", "question", "--solution_column", "answr",
    ),  # fmt: skip
}


EXPECTED = {
    "missing data file": "--dataset_name='{tmp}/no-such.jsonl': no such file or folder",
    "missing data folder": "--dataset_name='./no-such-folder/': no such file or folder",
    "missing model folder": "--model_name_or_path='{tmp}/no-model': {tmp}/no-model does not exist",
    "no dataset": "no dataset: pass --dataset_name",
    "model folder without weights": "--model_name_or_path='{tmp}': {tmp} has no config.json, no weights file, no "
    "tokenizer",
    "missing reward model folder": "--reward_model_name_or_path='./no-reward-model': {tmp}/no-reward-model does not",
    **{
        f"{suffix} without a prompt column": "dataset column 'prompt' (prompt_column) is missing from split 'train'; "
        "it has ['question', 'answer']; name the prompt column with --prompt_column."
        for suffix in (".jsonl", ".json", ".csv", ".tsv", ".parquet")
    },
    "misnamed prompt column": "dataset column 'questoin' (prompt_column) is missing from split 'train'",
    "misnamed solution column": "dataset column 'answr' (solution_column) is missing from split 'train'",
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_local_source_mistakes_are_one_line_naming_flag_and_value(tmp_path, mistake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = full_run_message(MISTAKES[mistake](tmp_path))
    assert message is not None and EXPECTED[mistake].format(tmp=tmp_path) in message, message


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".tsv", ".parquet"])
def test_a_data_file_with_the_named_columns_loads(tmp_path, suffix):
    data = write_data_file(tmp_path / f"data{suffix}")
    argv = flags(tmp_path, model_folder(tmp_path), data, "--prompt_column", "question", "--solution_column", "answer")
    command = parse_command(VARIANTS["dapo"], argv, accelerate_launch_options())
    train = prepare_split(load_splits(command.script_args, command.dataset_args), "train", command.script_args, "train")
    assert train["prompt"] == [record["question"] for record in RECORDS]
    assert [str(solution) for solution in train["solution"]] == [record["answer"] for record in RECORDS]


def imported_at_error(argv, env) -> tuple[str, set[str]]:
    """The error line of a real `python -X importtime -m trl_variants.cli` process and the top-level modules it
    imported: everything a process imports before it exits, so before its error."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trl_variants.cli", *argv],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    names = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    messages = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))
    return one_error_line(messages), {name.split(".")[0] for name in names}


LIGHT_MISTAKES = {
    "demo --steps 0": (["demo", "--steps", "0"], "--steps 0 is not allowed; expected an integer >= 1."),
    "mistyped command": (["dapoo", "--help"], "unknown command 'dapoo' (did you mean dapo?)"),
}


@pytest.mark.parametrize("mistake", LIGHT_MISTAKES)
def test_demo_and_command_mistakes_are_answered_before_torch_transformers_trl_datasets_or_accelerate_load(
    tmp_path, mistake
):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv, expected = LIGHT_MISTAKES[mistake]
    line, modules = imported_at_error([*argv, *(["--output_dir", str(tmp_path / "o")] if "demo" in argv else [])], env)
    assert line.startswith(f"trl-variants: error: {expected}")
    assert "trl_variants" in modules
    assert not HEAVY_MODULES & modules
