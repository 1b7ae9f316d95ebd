"""Output folders for the command line: an early writability check, a staged folder that only appears under its
final name once everything in it is written, and a resumable one that also keeps an unfinished run's work."""

import fcntl
import json
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


def check_not_finished(output_dir: str | os.PathLike, marker_file: str, overwrite: bool) -> None:
    """Raises `CliUsageError` when `output_dir` already holds a finished run (its `marker_file`) and `overwrite` is
    off: running again would replace it."""
    if not overwrite and (Path(output_dir).expanduser() / marker_file).is_file():
        raise CliUsageError(
            f"output_dir {str(output_dir)!r} already holds a finished run ({marker_file}); pass --overwrite to "
            "replace it, or another --output_dir."
        )


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


class ResumableFolder(StagedFolder):
    """`NAME.partial`, the sibling where an unfinished run keeps its work between calls: unlike `StagedFolder`'s,
    its name does not change, so the same command finds the work there and continues it, and an interrupt leaves
    it in place. `settings` (flag to value) are written into it as `SETTINGS_FILE`; a call with other settings is
    refused rather than mixing two runs, and so is a second process while one holds it (until the `with` block
    ends)."""

    SETTINGS_FILE = "run_settings.json"
    LOCK_FILE = ".lock"
    SUFFIX = ".partial"

    def __init__(self, final_path: str | os.PathLike, marker_file: str, settings: dict):
        self.final_path = Path(final_path).expanduser().absolute()
        self.marker_file = marker_file
        self.check_replaceable()
        self.path = self.final_path.with_name(self.final_path.name + self.SUFFIX)
        settings_path = self.path / self.SETTINGS_FILE
        self.resuming = self.path.exists()
        if self.resuming:
            if not settings_path.is_file():
                raise CliUsageError(
                    f"{str(self.path)!r} exists but holds no unfinished run (no {self.SETTINGS_FILE}); remove it or "
                    "pass another --output_dir."
                )
            kept = json.loads(settings_path.read_text(encoding="utf-8"))
            differences = [
                f"{flag} {kept.get(flag)!r}, not {value!r}"
                for flag, value in settings.items()
                if kept.get(flag) != value
            ]
            if differences:
                raise CliUsageError(
                    f"{str(self.path)!r} holds an unfinished run with other settings ({'; '.join(differences)}); "
                    "run it with its own settings to finish it, remove that folder to start afresh, or pass another "
                    "--output_dir."
                )
        else:
            self.path.mkdir(parents=True)
            settings_path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        self._lock = _exclusive_lock(self.path / self.LOCK_FILE)

    def publish(self) -> Path:
        final = super().publish()
        for name in (self.SETTINGS_FILE, self.LOCK_FILE):
            (final / name).unlink(missing_ok=True)
        return final

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._lock.close()
        return False


def _exclusive_lock(path: Path):
    """Holds an exclusive lock on `path` for the life of the returned file: two runs continuing the same unfinished
    run would write the same checkpoints. The lock goes with the process, however it ends."""
    lock = path.open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise CliUsageError(
            f"{str(path.parent)!r} is in use by another run of this command; wait for it to finish, or pass another "
            "--output_dir."
        ) from None
    return lock
