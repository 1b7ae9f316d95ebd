"""Fixtures shared by the dynamic-sampling trainer tests."""

import pytest
import torch

from trl_variants.toy import make_toy_task


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The toy model is far too small to gain from intra-op threads; on a shared 2-core machine they only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shared_task(one_torch_thread):
    return make_toy_task(seed=0)
