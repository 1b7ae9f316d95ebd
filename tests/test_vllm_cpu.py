"""`keep_linear_weights_reloadable` acts only for vLLM colocate runs on vLLM's CPU backend (the vLLM tests exercise
it with a real engine: every weight sync there goes through it)."""

from types import SimpleNamespace

from trl_variants.vllm_cpu import keep_linear_weights_reloadable


def test_runs_without_vllm_colocate_are_left_alone():
    assert keep_linear_weights_reloadable(SimpleNamespace(use_vllm=False, vllm_mode="colocate")) is False
    assert keep_linear_weights_reloadable(SimpleNamespace(use_vllm=True, vllm_mode="server")) is False


def test_without_vllm_installed_it_changes_nothing():
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        assert keep_linear_weights_reloadable() is False
    else:
        from vllm import _custom_ops

        keep_linear_weights_reloadable()
        assert _custom_ops._supports_onednn is False
