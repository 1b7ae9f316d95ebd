"""The TRL version guard: the package relies on TRL internals, so versions outside the tested range are refused
with an error naming both versions."""

from importlib.metadata import version

import pytest

from trl_variants._compat import SUPPORTED_TRL_TEXT, check_trl_version


def test_supported_range_is_the_tested_one():
    assert SUPPORTED_TRL_TEXT == ">=1.16,<1.17"


@pytest.mark.parametrize("installed", ["1.15.2", "1.17.0", "2.0.0", "0.29.0"])
def test_unsupported_trl_raises_naming_installed_and_supported_versions(installed):
    with pytest.raises(ImportError, match=rf"trl {installed.replace('.', '[.]')} is installed") as error:
        check_trl_version(installed)
    assert ">=1.16,<1.17" in str(error.value)


@pytest.mark.parametrize("installed", ["1.16.0", "1.16.3", "1.16.0.post1"])
def test_supported_trl_passes(installed):
    check_trl_version(installed)


def test_the_installed_trl_passes():
    assert version("trl").startswith("1.16.")
    check_trl_version()


@pytest.mark.parametrize("installed", ["1.17.0rc1", "1.17.0.dev0"])
def test_prereleases_of_the_next_minor_are_refused(installed):
    """A TRL built from its main branch after 1.16 reports 1.17.0.devN and already has 1.17's internals; pip's
    "<1.17" excludes such pre-releases too."""
    with pytest.raises(ImportError, match=installed.replace(".", "[.]")):
        check_trl_version(installed)
