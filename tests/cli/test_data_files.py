"""`--dataset_name` (and a recipe's `datasets:` entry) accepts one local data file wherever it accepts a folder."""

import json

import pytest
from datasets import Dataset

from trl_variants.cli import main
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.common import CliUsageError
from trl_variants.cli.launch import accelerate_launch_options
from trl_variants.cli.train import load_splits, prepare_split
from trl_variants.toy import make_toy_task

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(4) for b in range(4)]


def write_data_file(folder, suffix: str):
    path = folder / f"problems{suffix}"
    table = Dataset.from_list(ROWS)
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    elif suffix == ".json":
        path.write_text(json.dumps(ROWS))  # one JSON array, as many exports write it
    elif suffix == ".csv":
        table.to_csv(str(path), index=False)
    elif suffix == ".parquet":
        table.to_parquet(str(path))
    return path


def parsed(tmp_path, *flags):
    argv = ["--model_name_or_path", "m", "--reward_funcs", "dapo_accuracy", "--output_dir", str(tmp_path / "out"),
            "--use_cpu", "true", *flags]  # fmt: skip
    return parse_command(VARIANTS["dapo"], argv, accelerate_launch_options())


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".parquet"])
def test_one_data_file_loads_as_the_train_split(tmp_path, suffix):
    path = write_data_file(tmp_path, suffix)
    command = parsed(tmp_path, "--dataset_name", str(path), "--solution_column", "answer")
    splits = load_splits(command.script_args, command.dataset_args)
    assert list(splits) == ["train"]
    train = prepare_split(splits, "train", command.script_args, role="train")
    assert train["prompt"] == [row["prompt"] for row in ROWS]
    # CSV and parquet keep the type the file has; the answers read back as the same text either way.
    assert [str(answer) for answer in train["solution"]] == [row["answer"] for row in ROWS]


def test_relative_path_to_a_data_file(tmp_path, monkeypatch):
    write_data_file(tmp_path, ".jsonl")
    monkeypatch.chdir(tmp_path)
    command = parsed(tmp_path, "--dataset_name", "problems.jsonl")
    assert len(load_splits(command.script_args, command.dataset_args)["train"]) == len(ROWS)


def test_recipe_mixture_entry_may_name_one_data_file(tmp_path):
    path = write_data_file(tmp_path, ".csv")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"datasets:\n  - path: {path}\n")
    command = parsed(tmp_path, "--config", str(recipe))
    splits = load_splits(command.script_args, command.dataset_args)
    assert splits["train"]["prompt"] == [row["prompt"] for row in ROWS]


def test_file_of_an_unreadable_kind_is_one_line(tmp_path, capsys):
    path = tmp_path / "problems.xlsx"
    path.write_text("not data")
    command = parsed(tmp_path, "--dataset_name", str(path))
    with pytest.raises(CliUsageError) as error:
        load_splits(command.script_args, command.dataset_args)
    message = str(error.value)
    assert message.startswith(f"--dataset_name={str(path)!r} with --dataset_config=None cannot be loaded: ")
    assert "supported extension ['.csv'" in message and "\n" not in message


def test_dapo_command_trains_on_one_jsonl_file(tmp_path):
    task = make_toy_task(seed=0, warm_start_steps=0)
    model_dir = tmp_path / "model"
    task.model.save_pretrained(model_dir)
    task.tokenizer.save_pretrained(model_dir)
    data_file = write_data_file(tmp_path, ".jsonl")
    output_dir = tmp_path / "out"
    argv = ["dapo", "--model_name_or_path", str(model_dir), "--dataset_name", str(data_file),
            "--reward_funcs", "dapo_accuracy", "--output_dir", str(output_dir), "--use_cpu", "true",
            "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "4",
            "--report_to", "none", "--save_strategy", "no", "--max_steps", "1"]  # fmt: skip
    assert main(argv) == 0
    assert (output_dir / "model.safetensors").is_file()
    assert f"on the dataset `{data_file}` (not on the Hub)" in (output_dir / "README.md").read_text()
