"""Mistakes in a training command line, as TRL's own parser (`TrlParser`, through `args.VariantParser`) reads it:
one line naming the field or flag, the value and what is allowed, exit code 2, before a config object is built,
anything is loaded or anything is written to `--output_dir`."""

import pytest
import transformers.training_args

from trl_variants.cli import main
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.launch import accelerate_launch_options

from .errors import one_error_line


def base_flags(tmp_path) -> list[str]:
    """Valid flags around each mistake. The model and dataset are Hub ids the parse does not load: an error about
    them would mean the mistake was found too late."""
    return ["--model_name_or_path", "Qwen/Qwen2.5-0.5B", "--dataset_name", "openai/gsm8k",
            "--reward_funcs", "dapo_accuracy", "--output_dir", str(tmp_path / "out"), "--use_cpu", "true",
            "--bf16", "false"]  # fmt: skip


def error_of(tmp_path, capsys, command, argv) -> str:
    assert main([command, *argv]) == 2
    assert not (tmp_path / "out").exists()
    return one_error_line(capsys.readouterr().err).removeprefix("trl-variants: error: ")


@pytest.mark.parametrize(
    ("command", "flags", "expected"),
    [
        ("dapo", ["--learning_rate", "-1e-6"], "learning_rate=-1e-06 is not allowed; expected >= 0."),
        ("dapo", ["--learning_rate=abc"], "argument --learning_rate/--learning-rate: invalid float value: 'abc'"),
        ("dr-grpo", ["--temperature", "0"], "temperature=0.0 is not allowed; expected > 0."),
        ("dapo", ["--max_steps", "1.5"], "argument --max_steps/--max-steps: invalid int value: '1.5'"),
        ("dapo", ["--num_generations", "none"], "num_generations=None is not allowed; expected an integer >= 2"),
        ("grpo", ["--lr_scheduler_type", "sideways"], "argument --lr_scheduler_type/--lr-scheduler-type: invalid choice: 'sideways' (choose from"),
        ("dapo", ["--use_peft", "maybe"], "argument --use_peft/--use-peft: Truthy value expected: got maybe but expected one of yes/no"),
        ("dapo", ["--eps", "0.1"], "ambiguous option: --eps could match --epsilon, --epsilon_high"),
        ("dapo", ["--epsilon_hihg", "0.3"], "unknown argument --epsilon_hihg: not a field of DAPOConfig"),
        ("dapo", ["--num_process", "2"], "unknown argument --num_process: not a field of DAPOConfig, ModelConfig, DatasetMixtureConfig or the script arguments, nor an accelerate launch option (did you mean --num_processes"),
        ("dapo", ["stray"], "unexpected argument 'stray'; every option of `trl-variants dapo` is a --flag."),
        ("grpo", ["--use_peft", "--lora_dropout", "1.5"], "lora_dropout=1.5 is not allowed"),
        ("dapo", ["--max_completion_length", "none", "--top_p", "0"], "top_p=0.0 is not allowed; expected a value with 0 < value <= 1."),
        ("dapo", ["--epsilon_high", "0.1"], "epsilon_high=0.1 is not allowed; expected a value >= epsilon (0.2)"),
        ("dapo", ["--config"], "--config needs the path of a YAML recipe."),
        ("dapo", ["--dynamic_sampling_allocation", "true"], "dynamic_sampling_allocation was removed: "),
        ("dapo", ["--dynamic_sampling_allocation=false"], "is docs/results/allocation_study/README.md."),
    ],
)  # fmt: skip
def test_a_mistaken_flag_is_one_line_naming_field_value_and_what_is_allowed(tmp_path, capsys, command, flags, expected):
    line = error_of(tmp_path, capsys, command, [*base_flags(tmp_path), *flags])
    assert expected in line, line


@pytest.mark.parametrize(
    ("recipe_text", "expected"),
    [
        ("num_generations: 1\n", "num_generations=1 is not allowed; expected an integer >= 2"),
        ("epsilon_hihg: 0.28\n", "recipe key 'epsilon_hihg' in {recipe}: not a field of DAPOConfig"),
        ("learning_rate: abc\n", "learning_rate"),
        ("- a list\n", "must contain a YAML mapping"),
        ("key: [unclosed\n", "--config {recipe}: while parsing a flow sequence"),
        ("env: 3\n", "`env` field should be a dict"),
        ("max_completion_length: 0\nlearning_rate: 1.0e-6\n", "max_completion_length=0 is not allowed"),
        ("dynamic_sampling_allocation: true\n", "dynamic_sampling_allocation was removed: "),
    ],
)  # fmt: skip
def test_a_mistaken_recipe_is_one_line(tmp_path, capsys, recipe_text, expected):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_text)
    line = error_of(tmp_path, capsys, "dapo", ["--config", str(recipe), *base_flags(tmp_path)])
    assert expected.format(recipe=recipe) in line, line


def test_a_missing_or_unreadable_recipe_file_is_one_line(tmp_path, capsys):
    line = error_of(tmp_path, capsys, "dapo", ["--config", str(tmp_path / "no.yaml"), *base_flags(tmp_path)])
    assert line.startswith(f"--config {tmp_path / 'no.yaml'}: ") and "No such file or directory" in line
    line = error_of(tmp_path, capsys, "dapo", ["--config", str(tmp_path), *base_flags(tmp_path)])
    assert line.startswith(f"--config {tmp_path}: ") and "Is a directory" in line


@pytest.mark.parametrize(
    ("drop", "expected"),
    [("--model_name_or_path", "model_name_or_path is required"), ("--reward_funcs", "no reward: pass --reward_funcs")],
)
def test_a_missing_model_or_reward_is_one_line(tmp_path, capsys, drop, expected):
    flags = base_flags(tmp_path)
    index = flags.index(drop)
    assert error_of(tmp_path, capsys, "dr-grpo", flags[:index] + flags[index + 2 :]).startswith(expected)


def test_a_misspelt_field_gets_the_nearest_names(tmp_path, capsys):
    line = error_of(tmp_path, capsys, "dapo", [*base_flags(tmp_path), "--epsilon_hihg", "0.3"])
    assert "(did you mean --epsilon_high" in line

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("skip_degenerate_prompt: false\n")
    assert "(did you mean skip_degenerate_prompts?)" in error_of(
        tmp_path, capsys, "dapo", ["--config", str(recipe), *base_flags(tmp_path)]
    )
    line = error_of(tmp_path, capsys, "dapo", [*base_flags(tmp_path), "--reward_funcs", "dapo_acuracy"])
    assert "unknown reward 'dapo_acuracy' (did you mean dapo_accuracy?)" in line


def test_a_flag_far_from_every_field_gets_no_guess(tmp_path, capsys):
    line = error_of(tmp_path, capsys, "dapo", [*base_flags(tmp_path), "--zzzz", "1"])
    assert "did you mean" not in line and line.endswith("see `trl-variants dapo --help`.")


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without a GPU, as transformers sees it."""
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: False)


def test_bf16_without_a_gpu_is_transformers_line_after_every_naming_mistake(tmp_path, capsys, no_gpu):
    flags = base_flags(tmp_path)
    flags = flags[: flags.index("--use_cpu")]
    line = error_of(tmp_path, capsys, "dapo", flags)
    assert "bf16" in line and "use_cpu" in line
    # A typo or an out-of-range value is not hidden behind it: both are checked before the config is built.
    assert "unknown argument --epsilon_hihg" in error_of(tmp_path, capsys, "dapo", [*flags, "--epsilon_hihg", "0.3"])
    assert "top_p=0.0 is not allowed" in error_of(tmp_path, capsys, "dapo", [*flags, "--top_p", "0"])
    # The flags it names are enough.
    parsed = parse_command(VARIANTS["dapo"], [*flags, "--use_cpu", "true", "--bf16", "false"], {})
    assert parsed.training_args.use_cpu and not parsed.training_args.bf16


@pytest.mark.parametrize("recipe_text", ["reward_funcs: dapo_accuracy\n", "reward_funcs: nope\n"])
def test_a_recipe_names_one_reward_without_a_list(tmp_path, capsys, recipe_text):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(recipe_text)
    flags = base_flags(tmp_path)
    index = flags.index("--reward_funcs")
    argv = ["--config", str(recipe), *flags[:index], *flags[index + 2 :]]
    if "nope" in recipe_text:
        assert error_of(tmp_path, capsys, "dapo", argv).startswith("reward_funcs: unknown reward 'nope'")
    else:
        parsed = parse_command(VARIANTS["dapo"], argv, accelerate_launch_options())
        assert parsed.script_args.reward_funcs == ["dapo_accuracy"]
