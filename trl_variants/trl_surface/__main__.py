"""`python -m trl_variants.trl_surface`: which of the TRL code the package relies on changed.

    python -m trl_variants.trl_surface                          # the installed TRL against the fingerprints
    python -m trl_variants.trl_surface --trl-path /tmp/trl-new  # a TRL installed with pip install --target
    python -m trl_variants.trl_surface --record                 # record the installed TRL's fingerprints

The exit status is 0 when every entry is unchanged, 1 otherwise.
"""

import argparse
import json
import sys

from .compare import FINGERPRINTS, compare, describe, libraries, load_fingerprints, record, recorded_sources, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trl_variants.trl_surface",
        description="Compare the TRL code trl_variants overrides, calls or imports with the fingerprints recorded "
        "under the supported TRL: unchanged, changed (with a diff) or missing, per entry.",
    )
    parser.add_argument(
        "--trl-path",
        help="a folder holding the TRL to compare (`pip install --no-deps --target DIR trl==X`) instead of the "
        "installed one; transformers stays the installed one",
    )
    parser.add_argument(
        "--recorded-source",
        help="a folder holding the TRL (and transformers) of the recorded versions, for diffs of the changed "
        "entries; the installed ones serve when they are of the recorded versions and not being compared",
    )
    parser.add_argument(
        "--fingerprints", default=str(FINGERPRINTS), help="the fingerprint file (default: the package's own)"
    )
    parser.add_argument("--record", action="store_true", help="write the compared TRL's fingerprints to the file")
    options = parser.parse_args(argv)
    try:
        libs = libraries(options.trl_path)
        if options.record:
            recorded = record(libs)
            with open(options.fingerprints, "w", encoding="utf-8") as file:
                json.dump(recorded, file, indent=1)
                file.write("\n")
            print(f"Recorded {len(recorded['entries'])} fingerprints under {describe(libs)} in {options.fingerprints}.")
            return 0
        recorded = load_fingerprints(options.fingerprints)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    recorded_libs = recorded_sources(recorded, libs, options.recorded_source)
    comparisons = compare(recorded, libs, recorded_libs)
    sys.stdout.write(report(comparisons, recorded, libs, recorded_libs))
    return 0 if all(comparison.status == "unchanged" for comparison in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main())
