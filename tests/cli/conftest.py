import pytest


@pytest.fixture(autouse=True)
def user_cache_home(tmp_path_factory, monkeypatch):
    """Each test gets its own cache folder (`XDG_CACHE_HOME`), outside its `tmp_path`, so nothing a command keeps
    there reaches the user's cache or another test."""
    home = tmp_path_factory.mktemp("cache-home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home
