"""The TRL code the package relies on, recorded: what it overrides, calls or imports (`entries`), a fingerprint
of each under the last TRL tested and a digest of each TRL file they are looked up in (`fingerprints.json`), and
`python -m trl_variants.trl_surface`, which says which of them a TRL release changed. `import trl_variants` compares
the installed TRL with the record (trl_variants/_compat.py); CONTRIBUTING.md, "When TRL releases", says what to
do when TRL releases."""

import hashlib
from pathlib import Path

FINGERPRINTS = Path(__file__).with_name("fingerprints.json")


def file_digest(path: Path) -> str | None:
    """The SHA-256 of the file's bytes, `None` where there is no such file."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None
