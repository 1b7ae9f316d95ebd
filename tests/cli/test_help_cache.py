"""The pre-rendered `trl-variants COMMAND --help`: identical to the live help, used only when it can be, and
answering without importing torch or TRL."""

import json

import pytest

from trl_variants.cli import help_cache, main
from trl_variants.cli.common import VARIANT_COMMANDS

from .test_help import imported_modules

STORED = json.loads(help_cache.CACHE_FILE.read_text(encoding="utf-8"))
# A new TRL or transformers release may reword its help strings; there the stored text is not used (the help is
# rendered live, which the last test checks), and comparing it would test the release, not this package.
needs_stored_versions = pytest.mark.skipif(
    STORED["environment"] != help_cache.rendering_environment(),
    reason=f"variant_help.json was rendered under {STORED['environment']}, installed: "
    f"{help_cache.rendering_environment()}; run `python -m trl_variants.cli.help_cache` to store this environment's",
)


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


def test_live_help_when_other_versions_are_installed_or_other_options_given(capsys, monkeypatch):
    assert help_cache.cached_help("dapo", ["--help", "--output_dir", "x"]) is None
    assert help_cache.cached_help("demo", ["--help"]) is None
    stored = help_cache.cached_help("dr-grpo", ["--help"])
    monkeypatch.setattr(help_cache, "rendering_environment", lambda: {"python": "3.11", "trl": "1.17.0"})
    assert help_cache.cached_help("dr-grpo", ["--help"]) is None
    monkeypatch.setattr(help_cache, "render_help", lambda command: pytest.fail("the live help reads no cache"))
    assert run_main(capsys, "dr-grpo", "--help") == stored  # rendered live, the same text


@needs_stored_versions
def test_variant_help_imports_neither_torch_nor_trl():
    modules = imported_modules("dapo", "--help")
    assert "trl_variants" in modules
    assert not {"torch", "trl", "transformers", "datasets"} & modules
