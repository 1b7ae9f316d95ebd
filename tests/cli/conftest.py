import pytest


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path, monkeypatch):
    """`trl-variants COMMAND --help` may keep a rendered help in the user's cache folder; each test gets its own."""
    home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home
