"""An out-of-range numeric value, from a flag or a recipe, for any training command: one line, exit code 2, before
anything is loaded or written. The model and dataset paths do not exist, so an error about them would mean the
value was checked too late."""

import pytest

from trl_variants.cli import main


def run(tmp_path, capsys, command, *flags):
    output_dir = tmp_path / "out"
    argv = [command, "--model_name_or_path", str(tmp_path / "no-model"), "--dataset_name", str(tmp_path / "no-data"),
            "--reward_funcs", "dapo_accuracy", "--output_dir", str(output_dir), "--use_cpu", "true", *flags]  # fmt: skip
    code = main(argv)
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not output_dir.exists()
    return code, lines


@pytest.mark.parametrize(
    ("command", "flags", "message"),
    [
        ("dapo", ["--learning_rate", "-1e-6"], "learning_rate=-1e-06 is not allowed; expected >= 0."),
        ("dapo", ["--learning_rate=-1e-6"], "learning_rate=-1e-06 is not allowed; expected >= 0."),
        ("dapo", ["--learning_rate", "-.5E+1"], "learning_rate=-5.0 is not allowed; expected >= 0."),
        ("dr-grpo", ["--temperature", "0"], "temperature=0.0 is not allowed; expected > 0."),
        ("dapo", ["--max_steps", "0"], "max_steps=0 is not allowed; expected an integer >= 1, or -1"),
        ("dapo", ["--skip_probability_step", "-0.1"], "skip_probability_step=-0.1 is not allowed"),
        # TRL's own GRPOConfig would divide by the batch size before any check of its own.
        ("grpo", ["--per_device_train_batch_size", "0"], "per_device_train_batch_size=0 is not allowed"),
        ("grpo", ["--top_p", "1.5"], "top_p=1.5 is not allowed; expected a value with 0 < value <= 1."),
        ("grpo", ["--use_peft", "--lora_dropout", "1.5"], "lora_dropout=1.5 is not allowed"),
    ],
)
def test_out_of_range_flag_is_one_line_exit_2(tmp_path, capsys, command, flags, message):
    code, lines = run(tmp_path, capsys, command, *flags)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"trl-variants: error: {message}"), lines


def test_out_of_range_recipe_value_is_one_line_exit_2(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("num_generations: 1\nlearning_rate: 1.0e-6\n")
    code, lines = run(tmp_path, capsys, "dapo", "--config", str(recipe))
    assert code == 2
    assert lines == [
        "trl-variants: error: num_generations=1 is not allowed; expected an integer >= 2 (group-relative advantages "
        "need two completions per prompt)."
    ]


def test_negative_numbers_in_scientific_notation_parse_as_values(tmp_path):
    from trl_variants.cli.args import VARIANTS, parse_command
    from trl_variants.cli.launch import accelerate_launch_options

    parsed = parse_command(
        VARIANTS["dapo"],
        ["--model_name_or_path", "m", "--reward_funcs", "dapo_accuracy", "--output_dir", str(tmp_path),
         "--use_cpu", "true", "--entropy_coef", "-1e-3", "--max_grad_norm", "1E-1"],  # fmt: skip
        accelerate_launch_options(),
    )
    assert (parsed.training_args.entropy_coef, parsed.training_args.max_grad_norm) == (-0.001, 0.1)
