"""The TRL code the package relies on, recorded: what it overrides, calls or imports (`entries`), a fingerprint
of each under the supported TRL (`fingerprints.json`), and `python -m trl_variants.trl_surface`, which says which
of them a TRL release changed (CONTRIBUTING.md, "When TRL releases")."""
