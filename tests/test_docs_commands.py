"""The shell commands of docs/cli.md run as written on a CPU-only machine, offline (docs/index.md's convention for
runnable blocks, applied to `bash runnable` blocks).

Each `trl-variants` command of a `bash runnable` block runs in its `--max_steps 1` form (`--steps 1` for the demos)
from an empty folder holding the page's placeholders (`./my-model`: a tiny base model without a chat template;
`./my-data`: JSONL files with the GSM8K recipe's columns) and the repository's `examples/`. A model or dataset the
command names that is not a local path (a Hub id, out of reach offline) is replaced by a local stand-in of the same
kind: a tiny chat model built from a config, GSM8K-shaped rows. `pip install` steps are taken as done: the test
environment has the extras. A plain `bash` block must open with a `# needs ...` comment saying what it needs (GPUs)
and what to change without it; its commands are only parsed, so their flags stay valid.
"""

import json
import shlex
from pathlib import Path

import pytest

from trl_variants.cli import main

from .test_docs import REPO, fenced_blocks
from .helpers import load_example
from .tiny_chat_model import tiny_chat_model, use_tiny_chat_model

EXAMPLE = "examples/real_model_demo.py"

PAGE = REPO / "docs" / "cli.md"
RUNNABLE_BASH = "bash runnable"
TRAINING_COMMANDS = ("dapo", "dr-grpo", "grpo")
GSM8K_ROWS = [
    {"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?", "answer": f"#### {a + b}"}
    for a in range(1, 5)
    for b in range(1, 5)
]


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a bash block, each split into words: continuation lines joined, comments dropped, `&&`
    chains split."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            end = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:end])
            words = words[end + 1 :]
    return commands


def documented(info_string: str) -> list:
    return [
        pytest.param(command, id=f"cli.md:{line}:{' '.join(command[:2])}")
        for info, code, line in fenced_blocks(PAGE)
        if info == info_string
        for command in shell_commands(code)
        if command[0] == "trl-variants" or command[:2] == ["python", EXAMPLE]
    ]


def test_every_command_block_runs_or_says_what_it_needs():
    blocks = [(info, code, line) for info, code, line in fenced_blocks(PAGE) if info.split(" ")[0] == "bash"]
    runnable = [line for info, _, line in blocks if info == RUNNABLE_BASH]
    assert len(runnable) >= 4, blocks
    unmarked = [line for info, code, line in blocks if info == "bash" and not code.startswith("# needs ")]
    assert not unmarked, f"docs/cli.md: bash blocks at lines {unmarked} neither run nor say what they need"


def write_placeholders(folder: Path) -> None:
    """The page's `./my-model` and `./my-data`, and the repository's examples, in `folder`."""
    model, tokenizer = tiny_chat_model()
    tokenizer.chat_template = None  # "a base model without a chat template"
    model.save_pretrained(folder / "my-model")
    tokenizer.save_pretrained(folder / "my-model")
    (folder / "my-data").mkdir()
    (folder / "my-data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in GSM8K_ROWS))
    (folder / "examples").symlink_to(REPO / "examples")


def local_stand_ins(command: list[str], folder: Path) -> list[str]:
    """Flags replacing the model and dataset `command` names where they are not local paths."""
    from trl_variants.cli.args import VARIANTS, parse_command
    from trl_variants.cli.launch import accelerate_launch_options

    parsed = parse_command(VARIANTS[command[1]], command[2:], accelerate_launch_options())
    flags = []
    if not Path(folder, parsed.model_args.model_name_or_path).exists():
        model, tokenizer = tiny_chat_model()
        model.save_pretrained(folder / "stand-in-model")
        tokenizer.save_pretrained(folder / "stand-in-model")
        flags += ["--model_name_or_path", str(folder / "stand-in-model")]
    if parsed.script_args.dataset_name and not Path(folder, parsed.script_args.dataset_name).exists():
        flags += ["--dataset_name", str(folder / "my-data" / "train.jsonl"), "--dataset_config", "none"]
    return flags


@pytest.mark.slow
@pytest.mark.parametrize("command", documented(RUNNABLE_BASH))
def test_documented_command_runs_in_its_one_step_form(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_placeholders(tmp_path)
    if command[:2] == ["python", EXAMPLE]:  # on a tiny model; the real one: tests/real_model/test_commands.py
        example = load_example("real_model_demo")
        use_tiny_chat_model(example, monkeypatch.setattr)
        assert example.main([*command[2:], "--steps", "1"]) == 0, " ".join(command)
        return
    subcommand, arguments = command[1], command[2:]
    if subcommand in TRAINING_COMMANDS:
        arguments += ["--max_steps", "1", *local_stand_ins(command, tmp_path)]
    elif subcommand == "demo":
        arguments += ["--steps", "1"]
    assert main([subcommand, *arguments]) == 0, " ".join(command)


@pytest.mark.parametrize("command", documented("bash"))
def test_command_that_needs_gpus_parses(command):
    from trl_variants.cli.args import VARIANTS, parse_command
    from trl_variants.cli.launch import accelerate_launch_options

    arguments = [str(REPO / word) if word.startswith("examples/") else word for word in command[2:]]
    # use_cpu lets the config's own validation run here, where the recipe's bf16 would be refused.
    parsed = parse_command(VARIANTS[command[1]], [*arguments, "--use_cpu", "true"], accelerate_launch_options())
    assert type(parsed.training_args) is VARIANTS[command[1]].config_class
