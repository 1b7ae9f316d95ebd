"""Mistakes in a training command line reported before torch, transformers or TRL load (`quick_checks`): the same
one-line messages the full parse gives, the nearest field names for a misspelt one, and the flags a machine without
a GPU needs. The seconds they take are measured by `python -m benchmarks.cli_errors.cli_errors`, not here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import transformers.training_args

from trl_variants.cli import help_cache, main, quick_checks
from trl_variants.cli.args import VARIANTS, make_parser, parse_command
from trl_variants.cli.common import VARIANT_COMMANDS, CliUsageError
from trl_variants.cli.field_table import render_field_table
from trl_variants.cli.help_cache import stored_field_table
from trl_variants.cli.launch import accelerate_launch_options, missing_launch_package_problem
from trl_variants.cli.quick_checks import BF16_WITHOUT_GPU, check_command_line, string_to_bool

from .errors import one_error_line
from .test_help_cache import STORED, needs_stored_versions

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO_ROOT / "examples" / "recipes").glob("*.yaml"))
HEAVY_MODULES = {"torch", "transformers", "trl", "datasets", "accelerate"}


@pytest.fixture(scope="module")
def tables():
    return {command: render_field_table(command) for command in VARIANT_COMMANDS}


def base_flags(tmp_path) -> list[str]:
    """Valid flags around each mistake. Hub ids are checked only by the full run (`train.run_training`), which the
    parse alone does not reach; local paths are checked quickly (tests/cli/test_quick_sources.py)."""
    return ["--model_name_or_path", "Qwen/Qwen2.5-0.5B", "--dataset_name", "openai/gsm8k",
            "--reward_funcs", "dapo_accuracy", "--output_dir", str(tmp_path / "out"), "--use_cpu", "true",
            "--bf16", "false"]  # fmt: skip


def quick_message(command, argv, tables) -> str | None:
    try:
        check_command_line(command, argv, tables[command])
    except CliUsageError as error:
        return str(error)
    return None


def full_parse_message(command, argv) -> str | None:
    try:
        parse_command(VARIANTS[command], argv, accelerate_launch_options())
    except CliUsageError as error:
        return str(error)
    return None


@needs_stored_versions
@pytest.mark.parametrize("command", VARIANT_COMMANDS)
def test_stored_field_table_is_the_live_table(command, tables):
    stored = json.loads(json.dumps(tables[command]))  # as read back from JSON: tuples become lists
    assert STORED["fields"][command] == stored, (
        f"the stored field table of {command} is stale; run `python -m trl_variants.cli.help_cache`"
    )
    assert stored_field_table(command) == stored


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("dapo", ["--learning_rate", "-1e-6"]),
        ("dapo", ["--learning_rate=abc"]),
        ("dr-grpo", ["--temperature", "0"]),
        ("dapo", ["--max_steps", "1.5"]),
        ("dapo", ["--num_generations", "none"]),
        ("grpo", ["--lr_scheduler_type", "sideways"]),
        ("dapo", ["--use_peft", "maybe"]),
        ("dapo", ["--eps", "0.1"]),  # an ambiguous abbreviation
        ("dapo", ["--epsilon_hig", "0.3"]),  # an unambiguous one is the field, as in argparse
        ("dapo", ["--epsilon_hihg", "0.3"]),
        ("dapo", ["--num_process", "2"]),
        ("dapo", ["stray"]),
        ("grpo", ["--use_peft", "--lora_dropout", "1.5"]),
        ("dapo", ["--max_completion_length", "none", "--top_p", "0"]),
        ("dapo", ["--config"]),
    ],
)
def test_quick_checks_report_what_the_full_parse_reports(tmp_path, tables, command, flags):
    argv = [*base_flags(tmp_path), *flags]
    assert quick_message(command, argv, tables) == full_parse_message(command, argv)


@pytest.mark.parametrize(
    "recipe_text",
    ["num_generations: 1\n", "epsilon_hihg: 0.28\n", "learning_rate: abc\n", "- a list\n", "key: [unclosed\n",
     "env: 3\n", "max_completion_length: 0\nlearning_rate: 1.0e-6\n"],
)  # fmt: skip
def test_recipe_mistakes_read_alike(tmp_path, tables, recipe_text):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_text)
    argv = ["--config", str(recipe), *base_flags(tmp_path)]
    message = quick_message("dapo", argv, tables)
    assert message == full_parse_message("dapo", argv)


@pytest.mark.parametrize("drop", ["--model_name_or_path", "--reward_funcs"])
def test_a_missing_model_or_reward_reads_alike(tmp_path, tables, drop):
    flags = base_flags(tmp_path)
    index = flags.index(drop)
    argv = flags[:index] + flags[index + 2 :]
    message = quick_message("dr-grpo", argv, tables)
    assert message is not None and message == full_parse_message("dr-grpo", argv)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_every_shipped_recipe_passes(tmp_path, tables, recipe):
    command = "dr-grpo" if recipe.name.startswith("dr_grpo") else "dapo"
    argv = ["--config", str(recipe), "--use_cpu", "true", "--output_dir", str(tmp_path / "out")]
    # Every other check runs before the launch's packages are looked at: where DeepSpeed is absent, a recipe that
    # names a DeepSpeed config passes everything else and is refused for DeepSpeed alone.
    launch_config = yaml.safe_load(recipe.read_text()).get("accelerate_config")
    missing = None if launch_config is None else missing_launch_package_problem(launch_config)
    assert quick_message(command, argv, tables) == missing
    assert full_parse_message(command, argv) is None


def test_a_misspelt_field_gets_the_nearest_names(tmp_path, capsys):
    assert main(["dapo", *base_flags(tmp_path), "--epsilon_hihg", "0.3"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("trl-variants: error: unknown argument --epsilon_hihg: not a field of DAPOConfig")
    assert "(did you mean --epsilon_high or --epsilon?)" in line

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("skip_degenerate_prompt: false\n")
    assert main(["dapo", "--config", str(recipe), *base_flags(tmp_path)]) == 2
    assert "(did you mean skip_degenerate_prompts?)" in one_error_line(capsys.readouterr().err)

    assert main(["dapo", *base_flags(tmp_path), "--reward_funcs", "dapo_acuracy"]) == 2
    assert "unknown reward 'dapo_acuracy' (did you mean dapo_accuracy?)" in one_error_line(capsys.readouterr().err)


def test_a_flag_far_from_every_field_gets_no_guess(tmp_path, capsys):
    assert main(["dapo", *base_flags(tmp_path), "--zzzz", "1"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "did you mean" not in line and line.endswith("see `trl-variants dapo --help`.")


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without any accelerator, for the quick check and for transformers alike."""
    monkeypatch.setattr(quick_checks, "has_accelerator_device", lambda: False)
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: False)


def without_cpu_flags(flags):
    return flags[: flags.index("--use_cpu")]


def test_bf16_without_a_gpu_names_the_flags_to_add_after_every_naming_mistake(tmp_path, capsys, no_gpu):
    flags = without_cpu_flags(base_flags(tmp_path))
    assert main(["dapo", *flags]) == 2
    assert one_error_line(capsys.readouterr().err) == f"trl-variants: error: {BF16_WITHOUT_GPU}"
    # A typo is not hidden behind it.
    assert main(["dapo", *flags, "--epsilon_hihg", "0.3"]) == 2
    assert "unknown argument --epsilon_hihg" in one_error_line(capsys.readouterr().err)
    # The full parse gives the same advice where the quick check cannot tell (another OS, an unknown device).
    assert full_parse_message("dapo", flags) == BF16_WITHOUT_GPU
    # The flags it names are enough.
    assert quick_message("dapo", [*flags, *quick_checks.CPU_FLAGS.split()], {"dapo": render_field_table("dapo")}) is None


def test_any_accelerator_device_file_leaves_bf16_to_transformers(tmp_path):
    assert not quick_checks.has_accelerator_device(str(tmp_path)) or not sys.platform.startswith("linux")
    for name in ("nvidia0", "kfd", "dri", "accel", "dxg"):
        device = tmp_path / name
        device.write_text("")
        assert quick_checks.has_accelerator_device(str(tmp_path))
        device.unlink()


def test_bool_values_read_as_the_real_parser_reads_them():
    real = next(action.type for action in make_parser(VARIANTS["dapo"])._actions if action.dest == "use_peft")
    for text in ("yes", "True", "t", "Y", "1", "no", "FALSE", "f", "n", "0", "maybe", ""):
        try:
            expected = real(text)
        except Exception as error:  # noqa: BLE001 - the message is what is compared
            with pytest.raises(type(error)) as raised:
                string_to_bool(text)
            assert str(raised.value) == str(error)
        else:
            assert string_to_bool(text) is expected


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


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learning_rate", "-1e-6"], "learning_rate=-1e-06 is not allowed; expected >= 0."),
        (["--reward_funcs", "nope"], "reward_funcs: unknown reward 'nope'"),
        (["--epsilon_hihg", "0.3"], "unknown argument --epsilon_hihg"),
    ],
)
def test_bad_arguments_are_refused_before_torch_transformers_or_trl_load(tmp_path, flags, message):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    argv = ["dapo", *base_flags(tmp_path), *flags]
    if STORED["environment"] != help_cache.rendering_environment():
        imported_at_error(argv, env)  # other versions: the first run keeps the table for the next
    line, modules = imported_at_error(argv, env)
    assert line.startswith(f"trl-variants: error: {message}")
    assert "trl_variants" in modules  # the scan sees the package's own imports
    assert not HEAVY_MODULES & modules


def test_other_versions_check_fully_once_then_quickly_from_the_user_cache(tmp_path, capsys, monkeypatch, tables):
    monkeypatch.setattr(help_cache, "rendering_environment", lambda: {"python": "3.11", "trl": "9.0.0"})
    assert stored_field_table("dapo") is None
    argv = ["dapo", *base_flags(tmp_path), "--epsilon_hihg", "0.3"]
    checked = []
    check = quick_checks.check_command_line
    monkeypatch.setattr(quick_checks, "check_command_line", lambda *args: checked.append(args[0]) or check(*args))
    assert main(argv) == 2  # the full parse reports it, and keeps the table
    first = one_error_line(capsys.readouterr().err)
    assert checked == [] and stored_field_table("dapo") == json.loads(json.dumps(tables["dapo"]))
    assert main(argv) == 2
    assert checked == ["dapo"] and one_error_line(capsys.readouterr().err) == first
    assert first.startswith("trl-variants: error: unknown argument --epsilon_hihg")


@pytest.mark.parametrize("recipe_text", ["reward_funcs: dapo_accuracy\n", "reward_funcs: nope\n"])
def test_a_recipe_names_one_reward_without_a_list(tmp_path, tables, recipe_text):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_text)
    flags = base_flags(tmp_path)
    index = flags.index("--reward_funcs")
    argv = ["--config", str(recipe), *flags[:index], *flags[index + 2 :]]
    message = quick_message("dapo", argv, tables)
    if "nope" in recipe_text:
        assert message.startswith("reward_funcs: unknown reward 'nope'")
    else:
        assert message is None and full_parse_message("dapo", argv) is None
        parsed = parse_command(VARIANTS["dapo"], argv, accelerate_launch_options())
        assert parsed.script_args.reward_funcs == ["dapo_accuracy"]
