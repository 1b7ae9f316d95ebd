"""What a release needs besides the code: the license text the metadata declares, shipped in the wheel; authors and
classifiers; a changelog entry for the current version; and no link to a package-index page, since trl-variants is
not published on one yet."""

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_declared_license_is_the_license_file_the_wheel_ships():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text


def test_authors_and_classifiers():
    assert PROJECT["authors"] == [{"name": "trl-variants developers"}]
    classifiers = PROJECT["classifiers"]
    for prefix in ("Development Status ::", "Intended Audience ::", "Operating System ::", "Topic ::"):
        assert any(item.startswith(prefix) for item in classifiers), prefix
    minimum = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {minimum}" in classifiers


def test_the_changelog_has_the_current_version():
    assert re.search(rf"^## {re.escape(PROJECT['version'])}\b", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)


def test_nothing_the_package_writes_links_a_package_index_page():
    sources = [path for path in (REPO / "trl_variants").rglob("*.py")]
    assert sources
    for path in sources:
        assert "pypi.org/project" not in path.read_text(encoding="utf-8"), path
