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
SLOW_KINDS = ("multiprocess", "vllm", "real_model", "fsdp", "study_runner")


# Tests run in steps of their own of .ci/run, after the README's command, which skips them (about 10 minutes on an
# idle 2-core machine; the FSDP tests would add about 2, the study runner's about 2.5): they run when asked for, by
# marker (`pytest -m fsdp`, `pytest -m study_runner`), or by a path or keyword that names the kind (`pytest
# tests/fsdp`, `pytest -k fsdp`).
OWN_STEP_KINDS = ("fsdp", "study_runner")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `pytest -m "not slow"` must see these marks
def pytest_collection_modifyitems(config, items):
    asked = " ".join([config.getoption("markexpr"), config.getoption("keyword"), *config.args])
    for item in items:
        if any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.slow)
        for kind in OWN_STEP_KINDS:
            if item.get_closest_marker(kind) and kind not in asked:
                reason = f"runs on its own: python -m pytest -q -m {kind} (.ci/run does, after the README's command)"
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def _warm_toy_task():
    return make_toy_task(seed=0)


@pytest.fixture
def toy_task(_warm_toy_task):
    """A private copy of the warm-started toy policy, tokenizer and datasets, built once per test session."""
    return copy.deepcopy(_warm_toy_task)
