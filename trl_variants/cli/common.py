"""What every part of the command line shares. It imports nothing heavy, so `trl-variants --help` and the demo's
option mistakes answer without loading torch or TRL."""

import tempfile
from pathlib import Path

# The training commands, in the order the usage text lists them; `variants.VARIANTS` maps each to its classes.
VARIANT_COMMANDS = ("dapo", "dr-grpo", "grpo")


class CliUsageError(Exception):
    """Bad input from the command line or a recipe: reported as one line, exit code 2, no traceback."""


class CliRunError(Exception):
    """A run stopped for a reason the user can act on (the message says how): one line, exit code 1."""


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def check_output_dir(path: str) -> None:
    """Raises `CliUsageError` when `path` cannot be created or written, before any work starts: a temporary file is
    written into it or its nearest existing ancestor (permission bits say nothing for root or a read-only disk)."""
    probe = Path(path).expanduser().absolute()
    while not probe.exists():
        probe = probe.parent
    try:  # a file where a folder should be fails as "Not a directory"
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as error:
        reason = f"cannot be written ({error.strerror or error})"
        raise CliUsageError(f"output_dir {path!r} {reason}; pass a writable folder to --output_dir.") from None
