"""Every recipe in examples/recipes parses through the CLI's parser into a valid config, offline."""

import shlex
from pathlib import Path

import pytest

from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.launch import accelerate_launch_options, build_launch_namespace
from trl_variants.rewards.registry import resolve_reward

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO_ROOT / "examples" / "recipes").glob("*.yaml"))
HEADER_FIELDS = ("Model:", "Dataset:", "Hardware:", "Expected time:", "Run:")


def header(recipe: Path) -> list[str]:
    lines = []
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return lines


def run_command(recipe: Path) -> list[str]:
    """The `trl-variants ...` command the header documents, split into arguments."""
    (run_line,) = [line for line in header(recipe) if line.startswith("Run:")]
    arguments = shlex.split(run_line.removeprefix("Run:"))
    assert arguments[0] == "trl-variants", run_line
    return arguments[1:]


def test_the_expected_recipes_exist():
    names = {recipe.name for recipe in RECIPES}
    assert {
        "dapo_qwen2.5_32b.yaml",
        "dapo_qwen2.5_7b.yaml",
        "dr_grpo_qwen2.5_math_1.5b.yaml",
        "dr_grpo_qwen2.5_math_7b.yaml",
        "dapo_gsm8k_lora_1gpu.yaml",
    } <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_recipe_header_names_model_dataset_hardware_and_time(recipe):
    lines = header(recipe)
    for field in HEADER_FIELDS:
        assert any(line.startswith(field) and line.removeprefix(field).strip() for line in lines), field


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda path: path.name)
def test_recipe_parses_into_a_valid_config(recipe):
    command, *arguments = run_command(recipe)
    arguments = [str(recipe) if argument.endswith(recipe.name) else argument for argument in arguments]
    # The recipes target GPUs with bf16; use_cpu lets the config's own validation run on a machine without one.
    parsed = parse_command(VARIANTS[command], [*arguments, "--use_cpu", "true"], accelerate_launch_options())
    assert type(parsed.training_args) is VARIANTS[command].config_class
    for name in parsed.script_args.reward_funcs:
        resolve_reward(name)
    if parsed.launch_args:
        namespace = build_launch_namespace(command, parsed.launch_args, parsed.training_script_args)
        assert namespace.config_file and Path(namespace.config_file).is_file()


def parsed_recipe(name):
    recipe = REPO_ROOT / "examples" / "recipes" / name
    command = run_command(recipe)[0]
    return parse_command(VARIANTS[command], ["--config", str(recipe), "--use_cpu", "true"], accelerate_launch_options())


def test_dapo_32b_recipe_carries_the_paper_values():
    args = parsed_recipe("dapo_qwen2.5_32b.yaml").training_args
    assert (args.epsilon, args.epsilon_high, args.loss_type, args.beta) == (0.2, 0.28, "dapo", 0.0)
    assert (args.num_generations, args.generation_batch_size) == (16, 512 * 16)
    assert (args.max_completion_length, args.overlong_buffer_length) == (20480, 4096)
    assert args.dynamic_sampling and args.learning_rate == 1e-6
    # 512 completions per update on the documented 128 processes: 16 updates per rollout step.
    assert args.per_device_train_batch_size * 128 * args.gradient_accumulation_steps == 512


def test_dr_grpo_recipes_remove_both_biases():
    for name in ("dr_grpo_qwen2.5_math_1.5b.yaml", "dr_grpo_qwen2.5_math_7b.yaml"):
        parsed = parsed_recipe(name)
        args = parsed.training_args
        assert (args.loss_type, args.scale_rewards, args.beta) == ("dr_grpo", "none", 0.0)
        assert (args.num_generations, args.generation_batch_size, args.max_completion_length) == (8, 1024, 3000)
        assert parsed.script_args.dataset_filter == ["level=Level 3", "level=Level 4", "level=Level 5"]
        assert parsed.launch_args[:2] == ["--accelerate_config", "zero2"]


def test_gsm8k_recipe_trains_a_lora_adapter():
    parsed = parsed_recipe("dapo_gsm8k_lora_1gpu.yaml")
    assert parsed.model_args.use_peft and parsed.model_args.lora_r == 16
    assert parsed.launch_args == []  # one GPU: no accelerate relaunch
