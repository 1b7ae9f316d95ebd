"""The import check: the package subclasses and intercepts TRL internals, so it imports next to any TRL whose code
it relies on is unchanged, and refuses one in which some of that code changed, naming what changed.

The TRL code relied on is what `trl_surface/entries.py` lists, with a fingerprint of each under the last TRL tested in
`trl_surface/fingerprints.json`, which also keeps a digest of each TRL file those entries are looked up in. Where every
such file is byte-identical to the tested TRL's, so is every fingerprint, and the check reads no syntax tree; otherwise
it fingerprints the entries of the files that differ (`trl_surface.compare.trl_changes`). Only TRL's code is compared:
the entries defined in transformers are left to `python -m trl_variants.trl_surface`.
"""

import json
import os
import warnings
from importlib.util import find_spec
from pathlib import Path

from .trl_surface import FINGERPRINTS, file_digest

# Set to 1 to import next to a TRL in which some of the code relied on changed (with a warning instead of the error):
# for trying a TRL release, running `python -m trl_variants.trl_surface` next to it, or a user's own risk.
ALLOW_CHANGED_TRL = "TRL_VARIANTS_ALLOW_CHANGED_TRL"


def _trl_folder() -> Path | None:
    """The folder holding the `trl` package this Python would import (found, not imported)."""
    spec = find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def changed_trl_entries(folder: str | Path | None = None) -> tuple[str | None, list[str], str]:
    """(the TRL's version, the entries whose TRL code differs from the record's, the recorded TRL version) for the
    TRL in `folder` (a folder holding `trl/`, as `pip install --target` makes), by default the one this Python
    imports. An entry TRL no longer defines is named with "(not found)" after it. The version is read only where
    some file differs (`None` otherwise)."""
    recorded = json.loads(FINGERPRINTS.read_text(encoding="utf-8"))
    tested = recorded["versions"]["trl"]
    folder = _trl_folder() if folder is None else Path(folder)
    if folder is None or not (folder / "trl" / "__init__.py").is_file():
        where = "" if folder is None else f" in {folder}"
        raise ImportError(f"trl_variants needs TRL, but no trl package is installed{where}: pip install trl=={tested}")
    differing = {path for path, digest in recorded["trl_files"].items() if file_digest(folder / path) != digest}
    if not differing:
        return None, [], tested
    from .trl_surface.compare import trl_changes  # reads syntax trees: only where some file differs
    from .trl_surface.source import library_in

    trl = library_in("trl", folder)
    return trl.version, trl_changes(recorded, trl, differing), tested


def check_trl(folder: str | Path | None = None) -> None:
    """Raises a one-line ImportError naming the installed TRL version, the entries whose code it changed and the last
    TRL version tested, unless `TRL_VARIANTS_ALLOW_CHANGED_TRL=1`, which turns it into a warning."""
    allow = os.environ.get(ALLOW_CHANGED_TRL, "")
    if allow not in ("", "0", "1"):
        raise ImportError(
            f"{ALLOW_CHANGED_TRL}={allow!r} is not allowed: set it to 1 (import next to a changed TRL) or 0"
        )
    installed, changed, tested = changed_trl_entries(folder)
    if not changed:
        return
    message = (
        f"the installed trl {installed} differs from trl {tested}, the last version tested, in TRL code trl_variants "
        f"relies on: {', '.join(changed)}"
    )
    if allow == "1":
        warnings.warn(f"{message}; imported anyway since {ALLOW_CHANGED_TRL}=1.", stacklevel=2)
        return
    raise ImportError(f"{message}. Install trl=={tested}, or set {ALLOW_CHANGED_TRL}=1 to import it anyway.")
