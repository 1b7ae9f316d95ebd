import pytest


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path_factory, monkeypatch):
    """`trl-variants COMMAND --help` may keep a rendered help in the user's cache folder; each test gets its own,
    outside its `tmp_path`, whose contents some tests check."""
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home
