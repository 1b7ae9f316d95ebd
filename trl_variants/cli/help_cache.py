"""`trl-variants dapo|dr-grpo|grpo --help`, pre-rendered.

Rendering the help builds TRL's parser over four dataclasses, which first imports torch, transformers and TRL:
several seconds on a small machine, for a text that only changes with this package's code or with the installed
TRL and transformers. So the texts are rendered once into `variant_help.json`, next to this module, with the versions
they were rendered under; a plain `trl-variants COMMAND --help` prints the stored text when those versions are the
installed ones, and renders the help live otherwise. The help is rendered at a fixed width, so the stored and
the live text are the same on any terminal. A test renders every command's help live and compares it with the
stored text, so a change to a field, a group or a help string fails until the file is rendered again:

    python -m trl_variants.cli.help_cache
"""

import json
import sys
from importlib import metadata
from pathlib import Path

from .common import VARIANT_COMMANDS

CACHE_FILE = Path(__file__).with_name("variant_help.json")
# What the help text is made of besides this package: the configs' fields and help strings, and argparse.
RENDERED_WITH = ("trl", "transformers")
HELP_FLAGS = ({"--help"}, {"-h"})


def rendering_environment() -> dict[str, str]:
    versions = {name: metadata.version(name) for name in RENDERED_WITH}
    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}", **versions}


def cached_help(command: str, options: list[str]) -> str | None:
    """The stored help of `command` when `options` only ask for it and it was rendered under the installed versions;
    `None` when the help must be rendered live (other options given, no stored file, other versions)."""
    if command not in VARIANT_COMMANDS or set(options) not in HELP_FLAGS or len(options) != 1:
        return None
    try:
        stored = json.loads(CACHE_FILE.read_text(encoding="utf-8"))
        if stored["environment"] != rendering_environment():
            return None
        return stored["help"][command]
    except (OSError, ValueError, KeyError, metadata.PackageNotFoundError):
        return None


def render_help(command: str) -> str:
    """The help of `command` rendered live, exactly as `trl-variants COMMAND --help` prints it without the cache."""
    from .args import VARIANTS, make_parser

    return make_parser(VARIANTS[command], for_help=True).format_help()


def write_help_cache(path: Path = CACHE_FILE) -> None:
    texts = {command: render_help(command) for command in VARIANT_COMMANDS}
    content = {"environment": rendering_environment(), "help": texts}
    path.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_help_cache()
    print(f"Rendered the help of {', '.join(VARIANT_COMMANDS)} into {CACHE_FILE}.")
