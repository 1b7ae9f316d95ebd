"""The TRL versions this package is tested against. It subclasses TRL internals, so other versions are refused."""

from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet

SUPPORTED_TRL_TEXT = ">=1.16,<1.17"


def check_trl_version(installed: str | None = None) -> None:
    """Raises ImportError naming the installed and the supported TRL versions when they do not match."""
    if installed is None:
        try:
            installed = version("trl")
        except PackageNotFoundError:
            raise ImportError(f"trl_variants needs trl{SUPPORTED_TRL_TEXT}, but trl is not installed.") from None
    # Pre-releases of a supported version are accepted; `<1.17` still refuses 1.17's own pre-releases.
    if not SpecifierSet(SUPPORTED_TRL_TEXT).contains(installed, prereleases=True):
        raise ImportError(
            f"trl_variants supports trl{SUPPORTED_TRL_TEXT}, but trl {installed} is installed. "
            f"Install a supported version with: pip install 'trl{SUPPORTED_TRL_TEXT}'."
        )
