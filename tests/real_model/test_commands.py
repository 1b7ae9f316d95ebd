"""The real model end to end: examples/real_model_demo.py at a tiny size, and a training command on a reasoning-gym
task."""

import json

import pytest

from trl_variants.cli.main import main

from ..helpers import load_example
from .conftest import TINY_RUN

pytestmark = pytest.mark.real_model


def test_real_model_demo_prints_before_and_after_and_writes_its_folder(
    smollm2_path, arithmetic, tmp_path, capsys, monkeypatch
):
    example = load_example("real_model_demo")
    # The example's own batch, shrunk: the script's path is under test, not its training settings.
    for key, value in TINY_RUN.items():
        if key in ("per_device_train_batch_size", "num_generations", "max_completion_length"):
            monkeypatch.setitem(example.TRAINING, key, value)
    monkeypatch.setitem(example.VARIANT_SETTINGS, "dapo", {"overlong_buffer_length": 6})
    output_dir = tmp_path / "real-model"
    code = example.main(["--steps", "1", "--held_out_prompts", "2", "--samples_per_prompt", "1",
                         "--output_dir", str(output_dir)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "held-out pass rate (2 prompts x 1)" in printed and "; printed on " in printed
    for progress in ("before training: 2/2 samples", "step 1/1 (reward ", "after training: 2/2 samples"):
        assert progress in printed, printed
    assert not (tmp_path / "real-model.partial").exists()  # the work folder became the output
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["before"]["prompts"] == 2 and summary["steps"] == 1 and summary["variant"] == "dapo"
    assert summary["excluded_from_training"] > 0  # the held-out questions were removed from training
    written = {path.name for path in output_dir.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "training_log.jsonl"} <= written
    assert not [name for name in written if name.startswith("checkpoint")]


def test_training_command_on_a_reasoning_gym_task(smollm2_path, arithmetic, tmp_path, capsys):
    output_dir = tmp_path / "out"
    code = main([
        "dr-grpo", "--model_name_or_path", str(smollm2_path), "--reasoning_gym_task", "basic_arithmetic",
        "--reasoning_gym_config", '{"min_terms": 2, "max_terms": 2, "max_digits": 1}', "--reasoning_gym_size", "16",
        "--output_dir", str(output_dir), "--max_steps", "1", "--per_device_train_batch_size", "4",
        "--num_generations", "2", "--max_completion_length", "8", "--use_cpu", "true", "--bf16", "false",
        "--gradient_checkpointing", "false", "--report_to", "none", "--save_strategy", "no",
    ])
    assert code == 0
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert (output_dir / "model.safetensors").is_file() and "basic_arithmetic" in card
