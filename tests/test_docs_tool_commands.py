"""The commands of other tools that the docs, the examples and the package's own messages tell a user to run still
exist in the installed versions: a `*-cli` program (such as `huggingface-cli`, which huggingface_hub no longer
ships) must be an installed console script, and every `hf SUBCOMMAND ...` must answer `--help`."""

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".md", ".py", ".sh", ".yaml", ".yml", ".json", ".toml", ".txt"}
CLI_PROGRAM = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*(?:-[a-z0-9_]+)*-cli)\b")
# `hf` followed by its subcommand words, as a user would type it (in backticks or at the start of a code line).
HF_COMMAND = re.compile(r"(?:`|^\s*)hf((?: [a-z][a-z-]*)+)", re.MULTILINE)


def user_facing_files() -> list[Path]:
    roots = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "docs", REPO / "examples", REPO / "scripts",
             REPO / "trl_variants", REPO / ".ci"]  # fmt: skip
    files = []
    for root in roots:
        candidates = [root] if root.is_file() else sorted(root.rglob("*"))
        files += [path for path in candidates if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "run")]
    return files


def mentions(pattern: re.Pattern) -> dict[str, list[str]]:
    """Each match of `pattern`'s first group, with the files that mention it."""
    found = {}
    for path in user_facing_files():
        for match in pattern.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(match.group(1).strip(), []).append(str(path.relative_to(REPO)))
    return found


def test_every_cli_program_named_is_installed():
    installed = {entry.name for entry in entry_points(group="console_scripts")}
    missing = {name: files for name, files in mentions(CLI_PROGRAM).items() if name not in installed}
    assert not missing, f"programs that are not installed (retired?): {missing}"


HF_COMMANDS = mentions(HF_COMMAND)


def test_the_hf_commands_are_found():
    assert "examples/push_to_hub.py" in HF_COMMANDS["auth login"]  # the pattern sees the example's docstring


@pytest.mark.parametrize("words", sorted(HF_COMMANDS))
def test_every_hf_command_named_exists(words):
    hf = Path(sys.executable).with_name("hf")
    result = subprocess.run([str(hf), *words.split(), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"`hf {words}` ({HF_COMMANDS[words]}) does not exist: {result.stderr[-500:]}"
