"""The pre-rendered `trl-variants COMMAND --help`: identical to the live help, used only when it can be, kept per
environment where the shipped text does not apply, and answering without importing torch or TRL."""

import json

import pytest

from trl_variants.cli import help_cache, main
from trl_variants.cli.common import VARIANT_COMMANDS

from .test_help import imported_modules

STORED = json.loads(help_cache.CACHE_FILE.read_text(encoding="utf-8"))
# A new TRL or transformers release may reword its help strings; there the shipped text is not used (the help is
# rendered live and kept in the user's cache, which the other tests check), and comparing it would test the
# release, not this package.
needs_stored_versions = pytest.mark.skipif(
    STORED["environment"] != help_cache.rendering_environment(),
    reason=f"variant_help.json was rendered under {STORED['environment']}, installed: "
    f"{help_cache.rendering_environment()}; run `python -m trl_variants.cli.help_cache` to store this environment's",
)


@pytest.fixture
def other_versions(monkeypatch):
    """Versions the shipped file was not rendered under, as after a new transformers release."""
    monkeypatch.setattr(help_cache, "rendering_environment", lambda: {"python": "3.11", "trl": "9.0.0"})


@needs_stored_versions
@pytest.mark.parametrize("command", VARIANT_COMMANDS)
def test_stored_help_is_the_live_help(command):
    assert STORED["help"][command] == help_cache.render_help(command), (
        f"the stored help of {command} is stale; run `python -m trl_variants.cli.help_cache`"
    )


def run_main(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@needs_stored_versions
def test_help_prints_the_stored_text(capsys):
    assert run_main(capsys, "dapo", "--help") == help_cache.cached_help("dapo", ["--help"])
    assert run_main(capsys, "grpo", "-h") == help_cache.cached_help("grpo", ["-h"])


def test_only_a_plain_help_request_reads_a_store():
    assert help_cache.cached_help("dapo", ["--help", "--output_dir", "x"]) is None
    assert help_cache.cached_help("dapo", ["--help", "-h"]) is None
    assert help_cache.cached_help("demo", ["--help"]) is None


def test_other_versions_render_live_once_then_answer_from_the_user_cache(capsys, monkeypatch, other_versions):
    live = help_cache.render_help("dr-grpo")
    assert help_cache.cached_help("dr-grpo", ["--help"]) is None
    assert run_main(capsys, "dr-grpo", "--help") == live
    assert help_cache.cached_help("dr-grpo", ["--help"]) == live
    assert help_cache.cached_help("dapo", ["--help"]) is None  # kept per command, as each is asked for
    monkeypatch.setattr(help_cache, "render_help", lambda command: pytest.fail("the kept help is read, not rendered"))
    assert run_main(capsys, "dr-grpo", "-h") == live


def test_the_user_cache_key_changes_with_the_package_sources_and_the_versions(tmp_path, monkeypatch):
    package = tmp_path / "package"
    package.mkdir()
    (package / "config.py").write_text("HELP = 'one'\n")
    monkeypatch.setattr(help_cache, "PACKAGE_ROOT", package)
    environment = {"python": "3.11", "trl": "9.0.0"}
    first = help_cache.user_cache_file(environment)
    (package / "config.py").write_text("HELP = 'two'\n")
    edited = help_cache.user_cache_file(environment)
    assert edited != first
    assert help_cache.user_cache_file({**environment, "trl": "9.0.1"}) not in (first, edited)


def test_an_unwritable_cache_still_prints_the_live_help(capsys, monkeypatch, tmp_path, other_versions):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_folder))
    assert run_main(capsys, "grpo", "--help") == help_cache.render_help("grpo")
    assert help_cache.cached_help("grpo", ["--help"]) is None


def test_variant_help_imports_neither_torch_nor_trl(capsys):
    run_main(capsys, "dapo", "--help")  # where the shipped text does not apply, this fills the user's cache
    modules = imported_modules("dapo", "--help")
    assert "trl_variants" in modules
    assert not {"torch", "trl", "transformers", "datasets"} & modules
