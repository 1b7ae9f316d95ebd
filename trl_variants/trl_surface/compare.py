"""Comparing a TRL (the installed one, or any folder holding one) with the fingerprints recorded under the
supported TRL, entry by entry: unchanged, changed (with a unified diff where the recorded source is at hand) or
missing."""

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from . import FINGERPRINTS, file_digest
from .entries import CLASS_CHAINS, ENTRIES, SurfaceEntry
from .source import LIBRARIES, Library, find_at, installed_library, library_in, locate


def libraries(trl_path: str | Path | None = None) -> dict[str, Library]:
    """The installed TRL and transformers, with TRL taken from `trl_path` instead when given."""
    found = {name: installed_library(name) for name in LIBRARIES}
    if trl_path is not None:
        found["trl"] = library_in("trl", trl_path)
        if found["trl"] is None:
            raise ValueError(
                f"--trl-path {str(trl_path)!r} holds no TRL: expected {Path(trl_path) / 'trl' / '__init__.py'} (as "
                "pip install --no-deps --target DIR trl==X makes) or a trl package folder."
            )
    return {name: library for name, library in found.items() if library is not None}


def trl_files(entry: SurfaceEntry) -> tuple[str, ...]:
    """The TRL files `entry` is looked up in: its source's, or those of its class's chain that are TRL's."""
    sources = (entry.source,) if entry.source is not None else CLASS_CHAINS[entry.name.partition(".")[0]]
    return tuple(source.partition(":")[0] for source in sources if source.startswith("trl/"))


def record(libs: dict[str, Library]) -> dict:
    """The fingerprints of every entry in `libs`, with the versions they were taken under, and the digest of each
    TRL file the entries are looked up in (the import check compares those first, trl_variants/_compat.py)."""
    entries = {}
    for entry in ENTRIES:
        found = locate(entry, libs)
        if found is None:
            raise ValueError(f"Cannot record {entry.name}: it is not defined in {describe(libs)}.")
        entries[entry.name] = {"source": found.location, "fingerprint": found.fingerprint}
    folder = libs["trl"].root.parent
    files = sorted({path for entry in ENTRIES for path in trl_files(entry)})
    return {
        "versions": {name: library.version for name, library in libs.items()},
        "entries": entries,
        "trl_files": {path: file_digest(folder / path) for path in files},
    }


def load_fingerprints(path: str | Path = FINGERPRINTS) -> dict:
    recorded = json.loads(Path(path).read_text(encoding="utf-8"))
    unrecorded = [entry.name for entry in ENTRIES if entry.name not in recorded["entries"]]
    if unrecorded:
        raise ValueError(
            f"{path} has no fingerprint for {', '.join(unrecorded)}; record them under the supported TRL with "
            "python -m trl_variants.trl_surface --record."
        )
    return recorded


@dataclass(frozen=True)
class Comparison:
    """One entry's state: `status` is "unchanged", "changed" or "missing"; `location` is where it is defined now
    (`None` when missing), `recorded_location` where it was; `diff` the unified diff, `None` when the recorded
    source is not at hand (`note` then says why)."""

    entry: SurfaceEntry
    status: str
    location: str | None
    recorded_location: str
    diff: str | None = None
    note: str = ""


def recorded_sources(recorded: dict, libs: dict[str, Library], folder: str | Path | None) -> dict[str, Library]:
    """The libraries of the recorded versions at hand for diffs: those in `folder`, else an installed one of the
    recorded version that is not the one being compared."""
    at_hand = {}
    for name, version in recorded["versions"].items():
        library = library_in(name, folder) if folder is not None else None
        installed = installed_library(name)
        if library is None and installed is not None and installed.version == version and installed != libs.get(name):
            library = installed
        if library is not None:
            at_hand[name] = library
    return at_hand


def _diff(entry: SurfaceEntry, saved: dict, now, recorded_libs: dict[str, Library]) -> tuple[str | None, str]:
    library_name = saved["source"].split("/")[0]
    before = find_at(recorded_libs, saved["source"], entry.header_only)
    if before is None:
        return None, f"no recorded {library_name} at hand for a diff (--recorded-source DIR)"
    if before.fingerprint != saved["fingerprint"]:
        library = recorded_libs[library_name]
        return None, f"{library.root} ({library_name} {library.version}) is not the recorded source of this entry"
    lines = difflib.unified_diff(
        before.text.splitlines(keepends=True),
        now.text.splitlines(keepends=True),
        fromfile=f"{saved['source']} (recorded)",
        tofile=now.location,
    )
    return "".join(lines), ""


def compare(recorded: dict, libs: dict[str, Library], recorded_libs: dict[str, Library]) -> list[Comparison]:
    """Every entry of `ENTRIES` in `libs` against its recorded fingerprint."""
    comparisons = []
    for entry in ENTRIES:
        saved = recorded["entries"][entry.name]
        now = locate(entry, libs)
        if now is None:
            comparisons.append(Comparison(entry, "missing", None, saved["source"]))
        elif (now.location, now.fingerprint) == (saved["source"], saved["fingerprint"]):
            comparisons.append(Comparison(entry, "unchanged", now.location, saved["source"]))
        else:
            diff, note = _diff(entry, saved, now, recorded_libs)
            comparisons.append(Comparison(entry, "changed", now.location, saved["source"], diff, note))
    return comparisons


def trl_changes(recorded: dict, trl: Library, differing: set[str]) -> list[str]:
    """The entries whose TRL code in `trl` differs from the record's, looking only at those in the files of
    `differing` (the others are byte-identical): an entry recorded in TRL whose fingerprint or place changed, or
    that is gone ("(not found)" after its name), and one recorded in transformers that TRL now defines."""
    changed = []
    for entry in ENTRIES:
        if not differing.intersection(trl_files(entry)):
            continue
        saved = recorded["entries"][entry.name]
        now = locate(entry, {"trl": trl})
        if not saved["source"].startswith("trl/"):
            if now is not None:
                changed.append(entry.name)
        elif now is None:
            changed.append(f"{entry.name} (not found)")
        elif (now.location, now.fingerprint) != (saved["source"], saved["fingerprint"]):
            changed.append(entry.name)
    return changed


def describe(libs: dict[str, Library]) -> str:
    return ", ".join(f"{name} {library.version} ({library.root})" for name, library in libs.items())


def report(comparisons: list[Comparison], recorded: dict, libs: dict[str, Library], recorded_libs) -> str:
    """The table of entries and their state, a count, then each changed entry's diff and what the package relies
    on in it."""
    lines = [
        f"Comparing {describe(libs)}",
        "with the fingerprints recorded under "
        + ", ".join(f"{name} {version}" for name, version in recorded["versions"].items())
        + ".",
        f"Recorded source for diffs: {describe(recorded_libs) or 'none (--recorded-source DIR)'}.",
        "",
    ]
    width = max(len(comparison.entry.name) for comparison in comparisons)
    for comparison in comparisons:
        where = ""
        if comparison.status == "missing":
            where = f"  (was {comparison.recorded_location})"
        elif comparison.location != comparison.recorded_location:
            where = f"  (now {comparison.location}, was {comparison.recorded_location})"
        lines.append(f"{comparison.status:<9}  {comparison.entry.name:<{width}}{where}".rstrip())
    counts = {status: sum(c.status == status for c in comparisons) for status in ("unchanged", "changed", "missing")}
    lines += ["", f"{len(comparisons)} entries: " + ", ".join(f"{n} {status}" for status, n in counts.items()) + "."]
    for comparison in comparisons:
        if comparison.status == "unchanged":
            continue
        lines += ["", f"=== {comparison.status}: {comparison.entry.name}", f"relies on: {comparison.entry.relies_on}"]
        if comparison.diff is not None:
            lines.append(comparison.diff.rstrip("\n"))
        elif comparison.note:
            lines.append(f"({comparison.note})")
    return "\n".join(lines) + "\n"
