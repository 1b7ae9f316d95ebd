import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from trl_variants.toy import make_toy_task  # noqa: E402


@pytest.fixture
def toy_task():
    """A fresh warm-started toy policy, tokenizer and datasets (about a second to build)."""
    return make_toy_task(seed=0)
