"""`trl-variants dapo|dr-grpo|grpo --help` and the commands' field table, pre-rendered.

Rendering the help, or the table of fields that `quick_checks` reads a command line with, builds TRL's parser over
four dataclasses, which first imports torch, transformers and TRL: several seconds on a small machine, for data that
only change with this package's code or with the installed TRL, transformers and accelerate. So both are stored
and read from the store when they can be:

- `variant_help.json`, next to this module, ships them with the versions they were rendered under. Tests render
  every command's help and table live and compare them with the stored ones, so a change to a field, a group or a
  help string fails until the file is rendered again: `python -m trl_variants.cli.help_cache`.
- Where other versions are installed (a fresh install usually resolves a newer transformers), the first run of a
  command renders what it needs live and keeps it in the user's cache folder (`$XDG_CACHE_HOME/trl-variants`, by
  default `~/.cache/trl-variants`), under a key made of those versions and of this package's source files, so a
  later release or an edited checkout never reads an old text.

The help is rendered at a fixed width, so the stored and the live text are the same on any terminal.
"""

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from .common import VARIANT_COMMANDS

CACHE_FILE = Path(__file__).with_name("variant_help.json")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# What the stored data are made of besides this package: the configs' fields and help strings, argparse, and
# accelerate's launch options.
RENDERED_WITH = ("trl", "transformers", "accelerate")
# The stored sections: each command's help text, and each command's field table (`field_table`).
HELP, FIELDS = "help", "fields"
HELP_FLAGS = ({"--help"}, {"-h"})


def rendering_environment() -> dict[str, str]:
    versions = {name: metadata.version(name) for name in RENDERED_WITH}
    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}", **versions}


def asks_only_for_help(command: str, options: list[str]) -> bool:
    return command in VARIANT_COMMANDS and len(options) == 1 and set(options) in HELP_FLAGS


def user_cache_file(environment: dict[str, str]) -> Path:
    """Where this environment's rendered help is kept: one file per set of versions and package sources."""
    digest = hashlib.sha256(json.dumps(environment, sort_keys=True).encode())
    for source in sorted(PACKAGE_ROOT.rglob("*.py")):
        digest.update(source.relative_to(PACKAGE_ROOT).as_posix().encode())
        digest.update(source.read_bytes())
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache_home / "trl-variants" / f"help-{digest.hexdigest()[:16]}.json"


def _read_section(path: Path, environment: dict[str, str], section: str) -> dict:
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict) or stored.get("environment") != environment:
        return {}
    entries = stored.get(section)
    return entries if isinstance(entries, dict) else {}


def stored_entry(section: str, command: str):
    """`command`'s stored entry of `section` rendered under the installed versions (shipped with the package, or
    kept in the user's cache), or `None` when it must be rendered live."""
    try:
        environment = rendering_environment()
    except metadata.PackageNotFoundError:
        return None
    shipped = _read_section(CACHE_FILE, environment, section)
    if command in shipped:
        return shipped[command]
    return _read_section(user_cache_file(environment), environment, section).get(command)


def remember(section: str, command: str, entry) -> None:
    """Keeps a live-rendered entry in the user's cache. A cache that cannot be written (a read-only home, a full
    disk) only means the next run renders it live again, so the failure is not reported."""
    environment = rendering_environment()
    path = user_cache_file(environment)
    stored = {name: _read_section(path, environment, name) for name in (HELP, FIELDS)}
    stored[section] = {**stored[section], command: entry}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps({"environment": environment, **stored}, ensure_ascii=False), "utf-8")
        os.replace(partial, path)  # atomic, so a concurrent reader sees the old file or the new one
    except OSError:
        pass


def cached_help(command: str, options: list[str]) -> str | None:
    """The stored help of `command` when `options` only ask for it and it was rendered under the installed versions;
    `None` when the help must be rendered live."""
    if not asks_only_for_help(command, options):
        return None
    return stored_entry(HELP, command)


def remember_help(command: str, text: str) -> None:
    remember(HELP, command, text)


def stored_field_table(command: str) -> dict | None:
    """`command`'s field table (`field_table`) rendered under the installed versions, or `None` when there is none
    yet."""
    return stored_entry(FIELDS, command)


def remember_field_table(command: str) -> None:
    from .field_table import render_field_table

    table = render_field_table(command)
    if table is not None:
        remember(FIELDS, command, table)


def render_help(command: str) -> str:
    """The help of `command` rendered live, exactly as `trl-variants COMMAND --help` prints it without the cache."""
    from .args import VARIANTS, make_parser

    return make_parser(VARIANTS[command], for_help=True).format_help()


def write_help_cache(path: Path = CACHE_FILE) -> None:
    from .field_table import render_field_table

    content = {
        "environment": rendering_environment(),
        HELP: {command: render_help(command) for command in VARIANT_COMMANDS},
        FIELDS: {command: render_field_table(command) for command in VARIANT_COMMANDS},
    }
    path.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_help_cache()
    print(f"Rendered the help and the field tables of {', '.join(VARIANT_COMMANDS)} into {CACHE_FILE}.")
