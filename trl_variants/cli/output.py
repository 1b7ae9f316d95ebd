"""Output folders for the command line: an early writability check, and a staged folder that only appears under its
final name once everything in it is written."""

import os
import shutil
import tempfile
from pathlib import Path

from .common import CliUsageError


def check_output_dir(path: str | os.PathLike) -> None:
    """Raises `CliUsageError` when `path` cannot be created or written, before any work starts.

    The probe writes a temporary file into `path` or its nearest existing ancestor (permission bits alone say
    nothing for root, and nothing about read-only file systems) and creates nothing else.
    """
    target = Path(path).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise CliUsageError(f"output_dir {str(path)!r} is a file, not a folder; pass a folder path to --output_dir.")
    probe = target
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise CliUsageError(
            f"output_dir {str(path)!r} cannot be created: {str(probe)!r} is a file; pass a folder path to --output_dir."
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as error:
        raise CliUsageError(
            f"output_dir {str(path)!r} is not writable ({error.strerror or error}); pass a writable folder to "
            "--output_dir."
        ) from None


class StagedFolder:
    """A temporary sibling folder `.NAME.partial-XXXX` that becomes `final_path` in `publish()`.

    Until then nothing exists under the final name, so an interrupted run never leaves a half-written folder that
    looks finished; `discard()` removes the staging folder. An existing folder at `final_path` is replaced only when
    it is empty or carries `marker_file` (an earlier output of the same job), never an unrelated folder.
    """

    def __init__(self, final_path: str | os.PathLike, marker_file: str):
        self.final_path = Path(final_path).expanduser().absolute()
        self.marker_file = marker_file
        self.check_replaceable()
        self.final_path.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{self.final_path.name}.partial-", dir=self.final_path.parent))

    def check_replaceable(self) -> None:
        final = self.final_path
        if final.is_dir() and any(final.iterdir()) and not (final / self.marker_file).is_file():
            raise CliUsageError(
                f"output_dir {str(final)!r} already exists and holds other files; pass a new or empty folder to "
                "--output_dir (an earlier output of this command is replaced)."
            )

    def publish(self) -> Path:
        """Moves the staged folder to its final name; an earlier output there is replaced."""
        if not (self.path / self.marker_file).is_file():
            raise RuntimeError(f"{self.marker_file} must be written last, before publishing {self.path}.")
        self.check_replaceable()
        retired = None
        if self.final_path.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{self.final_path.name}.old-", dir=self.final_path.parent))
            os.replace(self.final_path, retired / "previous")
        os.replace(self.path, self.final_path)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
        return self.final_path

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
