import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from trl_variants.toy import make_toy_task  # noqa: E402

# The toy model is tiny: a second intra-op thread only adds contention, most of all beside subprocess tests.
torch.set_num_threads(1)

# Tests with these markers run several processes, a vLLM engine or a real model: all are slow, marked or not.
SLOW_KINDS = ("multiprocess", "vllm", "real_model", "fsdp")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `pytest -m "not slow"` must see these marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def _warm_toy_task():
    return make_toy_task(seed=0)


@pytest.fixture
def toy_task(_warm_toy_task):
    """A private copy of the warm-started toy policy, tokenizer and datasets, built once per test session."""
    return copy.deepcopy(_warm_toy_task)
