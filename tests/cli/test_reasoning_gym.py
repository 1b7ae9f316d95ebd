"""`--reasoning_gym_task`: mistakes in the task name or its config are one error line, before any model loads.
The training command itself runs on the real model in tests/real_model/test_commands.py."""

import pytest

from trl_variants.cli.main import main

from .errors import one_error_line

pytest.importorskip("reasoning_gym", reason='reasoning-gym is not installed: pip install ".[reasoning-gym]"')

@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--reasoning_gym_task", "basic_arithmetc"], "Did you mean basic_arithmetic"),
        (["--reasoning_gym_task", "basic_arithmetic", "--reasoning_gym_config", '{"terms": 2}'],
         "not a config key of reasoning-gym task 'basic_arithmetic'"),
        (["--reasoning_gym_task", "basic_arithmetic", "--reasoning_gym_config", "[2]"],
         "--reasoning_gym_config='[2]' is not a JSON object"),
        (["--reasoning_gym_task", "basic_arithmetic", "--reasoning_gym_config", "{terms"],
         "--reasoning_gym_config='{terms' is not a JSON object"),
    ],
)
def test_reasoning_gym_mistakes_are_one_line_before_anything_loads(tmp_path, capsys, flags, message):
    # The model folder does not exist: the task is checked first.
    code = main(["dapo", "--model_name_or_path", str(tmp_path / "no-model"), "--output_dir", str(tmp_path / "out"),
                 "--use_cpu", "true", "--bf16", "false", *flags])
    assert code == 2
    assert message in one_error_line(capsys.readouterr().err)


def test_reasoning_gym_task_and_a_dataset_are_exclusive(tmp_path, capsys):
    code = main(["dapo", "--model_name_or_path", "m", "--output_dir", str(tmp_path / "out"), "--use_cpu", "true",
                 "--bf16", "false", "--reasoning_gym_task", "basic_arithmetic", "--dataset_name", "data.jsonl"])
    assert code == 2
    assert "both name the training data; pass one of them" in one_error_line(capsys.readouterr().err)


def test_reasoning_gym_size_is_range_checked(tmp_path, capsys):
    code = main(["dapo", "--model_name_or_path", "m", "--output_dir", str(tmp_path / "out"),
                 "--reasoning_gym_task", "basic_arithmetic", "--reasoning_gym_size", "0"])
    assert code == 2
    assert "reasoning_gym_size=0 is not allowed" in one_error_line(capsys.readouterr().err)
