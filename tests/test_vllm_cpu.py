"""`keep_linear_weights_reloadable` acts only for vLLM colocate runs on vLLM's CPU backend, and the dispatch order it
reports follows vLLM 0.31's (tests/vllm/test_weight_sync.py exercises it with a real engine)."""

import importlib.util
from types import SimpleNamespace

import pytest

from trl_variants.vllm_cpu import keep_linear_weights_reloadable, vllm_cpu_linear_path


def test_runs_without_vllm_colocate_are_left_alone():
    assert keep_linear_weights_reloadable(SimpleNamespace(use_vllm=False, vllm_mode="colocate")) is False
    assert keep_linear_weights_reloadable(SimpleNamespace(use_vllm=True, vllm_mode="server")) is False


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_installed_it_changes_nothing():
    assert keep_linear_weights_reloadable() is False


@pytest.mark.parametrize(
    "zentorch, sgl_kernel, onednn, path",
    [
        (True, True, True, "zentorch"),
        (False, True, True, "sgl-kernel"),
        (False, False, True, "oneDNN"),
        (False, False, False, "torch linear"),
    ],
)
def test_the_path_vllm_would_take_follows_its_dispatch_order(zentorch, sgl_kernel, onednn, path):
    assert vllm_cpu_linear_path(zentorch=zentorch, sgl_kernel=sgl_kernel, onednn=onednn) == path
