"""The `trl-variants` command line: real parsing with TRL's parser, real training runs on the toy model, and the
one-line errors for bad input."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from peft import LoraConfig
from trl import GRPOConfig, get_peft_config

from trl_variants import DAPOConfig, DrGRPOConfig
from trl_variants.cli import main
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.launch import accelerate_launch_options, build_launch_namespace
from trl_variants.toy import make_toy_task

from .errors import one_error_line

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH_OPTIONS = accelerate_launch_options()


@pytest.fixture(scope="module")
def toy_files(tmp_path_factory):
    """The toy policy saved as a local model folder, and its problems as local JSONL datasets."""
    root = tmp_path_factory.mktemp("toy_files")
    task = make_toy_task(seed=0, warm_start_steps=30)
    model_dir = root / "model"
    task.model.save_pretrained(model_dir)
    task.tokenizer.save_pretrained(model_dir)
    datasets = {}
    for name, rows in {
        "answers": [{"prompt": p["prompt"], "answer": p["answer"]} for p in task.train_problems],
        "questions": [{"question": p["prompt"], "answer": p["answer"]} for p in task.train_problems],
    }.items():
        folder = root / name
        folder.mkdir()
        (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        datasets[name] = folder
    return {"model": model_dir, **datasets}


def toy_flags(toy_files, output_dir, dataset="answers"):
    return [
        "--model_name_or_path", str(toy_files["model"]),
        "--dataset_name", str(toy_files[dataset]),
        "--output_dir", str(output_dir),
        "--use_cpu", "true",
        "--bf16", "false",
        "--per_device_train_batch_size", "8",
        "--num_generations", "4",
        "--max_completion_length", "4",
        "--report_to", "none",
        "--save_strategy", "no",
        "--max_steps", "1",
    ]  # fmt: skip


def error_line(capsys) -> str:
    """The captured stderr must end with exactly one error line and hold no traceback."""
    return one_error_line(capsys.readouterr().err)


# --- Parsing ---------------------------------------------------------------------------------------------------


def test_each_variant_parses_into_its_own_config_class(toy_files, tmp_path):
    argv = [*toy_flags(toy_files, tmp_path), "--reward_funcs", "dapo_accuracy"]
    parsed = {command: parse_command(variant, argv, LAUNCH_OPTIONS) for command, variant in VARIANTS.items()}
    assert type(parsed["dapo"].training_args) is DAPOConfig
    assert type(parsed["dr-grpo"].training_args) is DrGRPOConfig
    assert type(parsed["grpo"].training_args) is GRPOConfig
    dr_grpo = parsed["dr-grpo"].training_args
    assert (dr_grpo.loss_type, dr_grpo.scale_rewards) == ("dr_grpo", "none")
    assert parsed["dapo"].training_args.epsilon_high == 0.28  # DAPO's defaults, not GRPO's


def test_recipe_values_apply_and_command_line_flags_win(toy_files, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        textwrap.dedent("""\
            learning_rate: 3.0e-4
            epsilon_high: 0.3
            overlong_buffer_length: 2
            reward_funcs: [dapo_accuracy, think_format_reward]
            use_peft: true
            lora_r: 4
            lora_target_modules: [q_proj, v_proj]
            num_processes: 2
        """)
    )
    argv = ["--config", str(recipe), *toy_flags(toy_files, tmp_path), "--learning_rate", "5e-4", "--num_processes", "4"]
    parsed = parse_command(VARIANTS["dapo"], argv, LAUNCH_OPTIONS)
    args = parsed.training_args
    assert args.learning_rate == 5e-4  # the command line overrides the recipe
    assert (args.epsilon_high, args.overlong_buffer_length) == (0.3, 2)
    assert parsed.script_args.reward_funcs == ["dapo_accuracy", "think_format_reward"]
    peft_config = get_peft_config(parsed.model_args)
    assert isinstance(peft_config, LoraConfig) and peft_config.r == 4
    assert set(peft_config.target_modules) == {"q_proj", "v_proj"}
    assert parsed.launch_args == ["--num_processes", "4"]  # the recipe's launch setting is overridden too
    assert "--num_processes" not in parsed.training_script_args


def test_accelerate_config_names_resolve_to_trl_bundled_files(toy_files, tmp_path):
    argv = [
        *toy_flags(toy_files, tmp_path),
        "--reward_funcs",
        "dapo_accuracy",
        "--accelerate_config",
        "zero3",
        "--num_processes",
        "8",
    ]
    parsed = parse_command(VARIANTS["dapo"], argv, LAUNCH_OPTIONS)
    namespace = build_launch_namespace("dapo", parsed.launch_args, parsed.training_script_args)
    import trl

    bundled = Path(trl.__file__).parent / "accelerate_configs" / "zero3.yaml"
    assert Path(namespace.config_file) == bundled  # used in place, not copied
    assert namespace.num_processes == 8
    assert namespace.module and namespace.training_script == "trl_variants.cli"
    assert namespace.training_script_args[0] == "dapo"
    assert "--accelerate_config" not in namespace.training_script_args
    assert "--model_name_or_path" in namespace.training_script_args


# --- Training runs ---------------------------------------------------------------------------------------------


def test_dapo_command_trains_and_saves_a_model_with_its_card(toy_files, tmp_path):
    output_dir = tmp_path / "out"
    argv = [
        "dapo",
        *toy_flags(toy_files, output_dir),
        "--reward_funcs",
        "dapo_accuracy",
        "--overlong_buffer_length",
        "2",
    ]
    assert main(argv) == 0
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "tokenizer.json").is_file()
    card = (output_dir / "README.md").read_text()
    assert "dapo" in card and "trl-variants" in card and "soft overlong punishment" in card
    # A local model and dataset are named, not linked as if they were on the Hub.
    assert "None" not in card and "huggingface.co/datasets" not in card
    assert f"fine-tuned version of the local model `{toy_files['model']}`" in card
    assert f"on the dataset `{toy_files['answers']}` (not on the Hub)" in card
    assert f'model="{output_dir}"' in card


def test_dataset_columns_are_mapped_and_lora_flags_train_an_adapter(toy_files, tmp_path):
    output_dir = tmp_path / "out"
    argv = [
        "dr-grpo", *toy_flags(toy_files, output_dir, dataset="questions"),
        "--prompt_column", "question", "--solution_column", "answer", "--reward_funcs", "dapo_accuracy",
        "--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj",
    ]  # fmt: skip
    assert main(argv) == 0
    assert (output_dir / "adapter_model.safetensors").is_file()
    assert not (output_dir / "model.safetensors").exists()
    assert "dr-grpo" in (output_dir / "README.md").read_text()


RECORDING_REWARD = """
import json, os

def launched_reward(completions, answer, **kwargs):
    with open(os.environ["REWARD_RECORD"], "w") as record:
        json.dump({"launched": os.environ.get("TRL_VARIANTS_LAUNCHED"), "columns": sorted(kwargs)}, record)
    return [1.0 if text.strip().startswith(gold) else -1.0 for text, gold in zip(completions, answer)]
"""


@pytest.mark.slow
def test_accelerate_config_relaunches_the_command_through_accelerate(toy_files, tmp_path):
    """`--accelerate_config single_gpu` (TRL's bundled file) starts the training in a process of its own, which
    loads a reward function by dotted path from the working directory."""
    (tmp_path / "my_rewards.py").write_text(RECORDING_REWARD)
    record = tmp_path / "record.json"
    output_dir = tmp_path / "out"
    command = [
        sys.executable, "-m", "trl_variants.cli", "grpo", *toy_flags(toy_files, output_dir),
        "--reward_funcs", "my_rewards.launched_reward",
        "--accelerate_config", "single_gpu", "--mixed_precision", "no",
    ]  # fmt: skip
    env = {**os.environ, "REWARD_RECORD": str(record), "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(record.read_text())["launched"] == "1"  # the reward ran in the launched process
    assert (output_dir / "model.safetensors").is_file()
    card = (output_dir / "README.md").read_text()  # TRL's own card for the baseline, tidied the same way
    assert "None" not in card and "huggingface.co/datasets" not in card and "the local model" in card


# --- Bad input -------------------------------------------------------------------------------------------------


def test_unknown_reward_names_it_and_lists_accepted(toy_files, tmp_path, capsys):
    assert main(["dapo", *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "accuracy"]) == 2
    line = error_line(capsys)
    assert "'accuracy'" in line and "dapo_accuracy" in line and "think_format_reward" in line
    assert not (tmp_path / "o").exists()


def test_overlong_punishment_is_not_a_reward_name(toy_files, tmp_path, capsys):
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "soft_overlong_punishment"]
    assert main(argv) == 2
    assert "--overlong_buffer_length" in error_line(capsys)


def test_missing_prompt_column(toy_files, tmp_path, capsys):
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "o", dataset="questions"), "--reward_funcs", "dapo_accuracy"]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "'prompt'" in line and "'question'" in line and "--prompt_column" in line
    assert not (tmp_path / "o").exists()


def test_missing_answer_column_for_the_reward(toy_files, tmp_path, capsys):
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "accuracy_reward"]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "accuracy_reward" in line and "'solution'" in line and "'answer'" in line


def test_recipe_key_that_is_no_config_field(toy_files, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("learning_rate: 1.0e-6\nepsilon_hihg: 0.28\n")
    argv = ["dapo", "--config", str(recipe), *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "dapo_accuracy"]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "'epsilon_hihg'" in line and "DAPOConfig" in line and str(recipe) in line


@pytest.mark.parametrize(
    "extra, expected",
    [(["--no_such_flag", "1"], "unknown argument --no_such_flag"), (["stray"], "unexpected argument 'stray'")],
)
def test_unknown_flag_or_stray_word(toy_files, tmp_path, capsys, extra, expected):
    argv = ["dapo", *extra, *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "dapo_accuracy"]
    assert main(argv) == 2
    assert expected in error_line(capsys)


def test_invalid_config_value_is_one_line(toy_files, tmp_path, capsys):
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "o"), "--reward_funcs", "dapo_accuracy", "--epsilon_high", "0.1"]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "epsilon_high=0.1" in line and ">= epsilon" in line


def test_unwritable_output_dir(toy_files, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    argv = ["dapo", *toy_flags(toy_files, blocker / "out"), "--reward_funcs", "dapo_accuracy"]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "output_dir" in line and "a_file" in line


def test_unknown_accelerate_config_lists_bundled_names(toy_files, tmp_path, capsys):
    argv = [
        "dapo",
        *toy_flags(toy_files, tmp_path / "o"),
        "--reward_funcs",
        "dapo_accuracy",
        "--accelerate_config",
        "zero9",
    ]
    assert main(argv) == 2
    line = error_line(capsys)
    assert "--accelerate_config" in line and "zero9" in line and "zero3" in line and "fsdp2" in line


def test_unknown_command(capsys):
    assert main(["ppo"]) == 2
    line = error_line(capsys)
    assert "'ppo'" in line and "dr-grpo" in line and "demo" in line


@pytest.mark.slow
def test_bad_input_exits_2_with_one_line_from_the_installed_module(toy_files, tmp_path):
    """The same contract seen from outside: a real process, its exit code and its whole stderr."""
    command = [
        sys.executable,
        "-m",
        "trl_variants.cli",
        "dapo",
        *toy_flags(toy_files, tmp_path / "o"),
        "--reward_funcs",
        "nope",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    assert result.returncode == 2
    assert one_error_line(result.stderr).startswith("trl-variants: error: reward_funcs: unknown reward 'nope'")


# --- Adapting a recipe to local data ---------------------------------------------------------------------------

LOCAL_DATA_RECIPE = """\
dataset_name: openai/gsm8k
dataset_config: main
prompt_column: question
solution_column: answer
system_prompt: "Solve the problem."
reward_funcs: [dapo_accuracy]
"""


def test_any_optional_recipe_key_can_be_unset_from_the_command_line(toy_files, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL_DATA_RECIPE + "overlong_buffer_length: 2\ndataset_filter: [level=Level 4]\n")
    argv = ["--config", str(recipe), *toy_flags(toy_files, tmp_path, dataset="questions")]
    argv += ["--dataset_config", "none", "--overlong_buffer_length=None", "--solution_column", "null",
             "--dataset_filter", "NONE"]  # fmt: skip
    parsed = parse_command(VARIANTS["dapo"], argv, LAUNCH_OPTIONS)
    assert parsed.script_args.dataset_config is None and parsed.script_args.dataset_filter is None
    assert parsed.script_args.solution_column is None
    assert parsed.training_args.overlong_buffer_length is None
    assert parsed.script_args.system_prompt == "Solve the problem."  # keys not unset keep the recipe's value
    # "none" is a value of report_to, not an unset
    plain_argv = [*toy_flags(toy_files, tmp_path), "--reward_funcs", "dapo_accuracy"]
    plain = parse_command(VARIANTS["dapo"], plain_argv, LAUNCH_OPTIONS)
    assert plain.training_args.report_to in ([], "none", ["none"])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (False, None)),
        (["--skip_degenerate_prompts", "--dynamic_sampling_carry_surplus"], (True, True)),
        (["--skip_degenerate_prompts", "false", "--dynamic_sampling_carry_surplus=False"], (False, False)),
        (["--skip_degenerate_prompts", "true", "--dynamic_sampling_carry_surplus", "none"], (True, None)),
    ],
)
def test_sampling_options_take_a_bare_flag_or_a_bool_and_carrying_also_none(toy_files, tmp_path, flags, expected):
    argv = [*toy_flags(toy_files, tmp_path), "--reward_funcs", "dapo_accuracy", *flags]
    args = parse_command(VARIANTS["dapo"], argv, LAUNCH_OPTIONS).training_args
    assert (args.skip_degenerate_prompts, args.dynamic_sampling_carry_surplus) == expected


def test_recipe_runs_on_local_data_with_its_hub_settings_turned_off(toy_files, tmp_path, monkeypatch):
    """The GSM8K recipe's Hub config and system prompt turned off from the command line; `answer` is still there
    for a reward that reads it, although `solution_column: answer` maps it to `solution`."""
    (tmp_path / "answer_rewards.py").write_text(
        "def reads_answer(completions, answer, solution, **kwargs):\n"
        "    assert answer == solution\n"
        "    return [1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer)]\n"
    )
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL_DATA_RECIPE.replace("[dapo_accuracy]", "[answer_rewards.reads_answer]"))
    output_dir = tmp_path / "out"
    argv = ["dapo", "--config", str(recipe), *toy_flags(toy_files, output_dir, dataset="questions")]
    assert main([*argv, "--dataset_config", "none", "--system_prompt", ""]) == 0
    assert (output_dir / "model.safetensors").is_file()


def test_system_prompt_without_a_chat_template_fails_before_training(toy_files, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL_DATA_RECIPE)
    argv = ["dapo", "--config", str(recipe), *toy_flags(toy_files, tmp_path / "o", dataset="questions")]
    assert main([*argv, "--dataset_config", "none"]) == 2
    line = error_line(capsys)
    assert "no chat template" in line and "--system_prompt" in line and str(toy_files["model"]) in line
    assert not (tmp_path / "o").exists()


def test_training_run_prints_no_warning_the_package_defaults_trigger(toy_files, tmp_path):
    """GRPOConfig's default `gradient_checkpointing=True` makes TRL call transformers' deprecated methods at every
    step; those warnings are silenced, and another FutureWarning still shows."""
    import warnings

    argv = ["dapo", *toy_flags(toy_files, tmp_path / "out"), "--reward_funcs", "dapo_accuracy"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
        warnings.warn("unrelated", FutureWarning)
    messages = [str(warning.message) for warning in caught]
    assert not [message for message in messages if "checkpointing" in message], messages
    assert "unrelated" in messages
