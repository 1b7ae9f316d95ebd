"""Local model folders and data files named on the command line are checked before torch, transformers or TRL load
(`quick_checks.check_local_sources`), with the message the full run (`train.run_training`) gives for the same
mistake; `benchmarks/cli_errors` times them."""

import json
import os

import pyarrow
import pyarrow.parquet
import pytest

from trl_variants.cli import help_cache
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.data_file_columns import column_surely_absent, data_file_columns
from trl_variants.cli.launch import accelerate_launch_options
from trl_variants.cli.train import run_training

from .test_help_cache import STORED
from .test_quick_checks import HEAVY_MODULES, REPO_ROOT, imported_at_error, quick_message, tables  # noqa: F401

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


@pytest.mark.parametrize("mistake", MISTAKES)
def test_local_source_mistakes_read_as_the_full_run_reads_them(tmp_path, tables, mistake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = MISTAKES[mistake](tmp_path)
    message = quick_message("dapo", argv, tables)
    assert message is not None
    assert message == full_run_message(argv)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".tsv", ".parquet"])
def test_a_data_file_with_the_named_columns_passes(tmp_path, tables, suffix):
    data = write_data_file(tmp_path / f"data{suffix}")
    argv = flags(tmp_path, model_folder(tmp_path), data, "--prompt_column", "question", "--solution_column", "answer")
    assert data_file_columns(str(data)) == ["question", "answer"]
    assert quick_message("dapo", argv, tables) is None


def test_a_json_column_missing_only_from_the_first_record_is_left_to_datasets(tmp_path):
    data = write_data_file(tmp_path / "data.jsonl", [{"question": "1+1"}, {"question": "2+2", "prompt": "2+2"}])
    columns = data_file_columns(str(data))
    assert columns == ["question"]
    assert not column_surely_absent(str(data), "prompt", columns)
    assert column_surely_absent(str(data), "solution", columns)


def test_a_json_file_is_read_only_as_far_as_its_first_record(tmp_path):
    """Past its first 2 MB of records the file holds bytes no reader can decode: reading them would fail."""
    data = tmp_path / "big.jsonl"
    line = json.dumps({"prompt": "x" * 1000}) + "\n"
    data.write_bytes((line * 2000).encode() + b"\xff\xfe not text")
    assert data_file_columns(str(data)) == ["prompt"]


@pytest.mark.parametrize(
    ("text", "columns"),
    [("[]", None), ('{"a": [1, 2], "b": [3, 4]}', ["a", "b"]), ("not json", None), ("  [\n  {\"a\": 1}]", ["a"])],
)
def test_json_layouts(tmp_path, text, columns):
    data = tmp_path / "data.json"
    data.write_text(text)
    assert data_file_columns(str(data)) == columns


def test_a_compressed_file_is_left_to_datasets(tmp_path):
    data = tmp_path / "data.jsonl.gz"
    data.write_bytes(b"\x1f\x8b")
    assert data_file_columns(str(data)) is None


def command_lines(tmp_path) -> dict[str, list[str]]:
    """Each command-line mistake `benchmarks/cli_errors` times, as `trl-variants` arguments."""
    data = write_data_file(tmp_path / "data.jsonl")
    model = model_folder(tmp_path)
    return {
        "missing data file": ["dapo", *flags(tmp_path, model, tmp_path / "no-such.jsonl")],
        "data file without the prompt column": ["dapo", *flags(tmp_path, model, data)],
        "Parquet file without the prompt column": [
            "dapo", *flags(tmp_path, model, write_data_file(tmp_path / "data.parquet"))
        ],
        "missing model folder": ["dapo", *flags(tmp_path, tmp_path / "no-model", data)],
        "demo --steps 0": ["demo", "--steps", "0", "--output_dir", str(tmp_path / "demo")],
        "real-demo --held_out_prompts 0": ["real-demo", "--held_out_prompts", "0"],
        "mistyped command": ["dapoo", "--help"],
    }


EXPECTED_LINES = {
    "missing data file": "--dataset_name=",
    "data file without the prompt column": "dataset column 'prompt' (prompt_column) is missing",
    "Parquet file without the prompt column": "dataset column 'prompt' (prompt_column) is missing",
    "missing model folder": "--model_name_or_path=",
    "demo --steps 0": "--steps 0 is not allowed; expected an integer >= 1.",
    "real-demo --held_out_prompts 0": "--held_out_prompts 0 is not allowed",
    "mistyped command": "unknown command 'dapoo' (did you mean dapo?)",
}


@pytest.mark.parametrize("mistake", EXPECTED_LINES)
def test_command_line_mistakes_are_answered_before_torch_transformers_trl_datasets_or_accelerate_load(
    tmp_path, mistake
):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = command_lines(tmp_path)[mistake]
    if argv[0] == "dapo" and STORED["environment"] != help_cache.rendering_environment():
        imported_at_error(argv, env)  # other versions: the first run keeps the field table for the next
    line, modules = imported_at_error(argv, env)
    assert line.startswith(f"trl-variants: error: {EXPECTED_LINES[mistake]}")
    assert "trl_variants" in modules
    assert not HEAVY_MODULES & modules
