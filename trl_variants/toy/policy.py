"""The toy task's warm-started policy: shipped with the package for `make_toy_task`'s default settings (trained
once by `scripts/build_toy_policy.py`: the warm start took 35 s or more on a loaded 2-core machine), trained for
any other. The file records the machine that trained it: another CPU trains another trajectory from the same seed,
so a test retrains the weights bit for bit only there, and elsewhere checks that they score as the shipped ones do.
"""

import json
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_model, save_model
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from ..machine import cpu_model
from .data import split_problems
from .model import build_tiny_model, warm_start
from .tokenizer import build_char_tokenizer

SHIPPED_POLICY_FILE = Path(__file__).with_name("warm_policy_seed0.safetensors")
# `make_toy_task`'s defaults with seed 0: the settings the shipped policy was trained with.
SHIPPED_SETTINGS = {
    "seed": 0,
    "warm_start_steps": 100,
    "max_operand": 9,
    "held_out_fraction": 0.2,
    "hidden_size": 64,
    "num_layers": 2,
    "num_attention_heads": 4,
}


def warm_policy(tokenizer: PreTrainedTokenizerFast, train_problems: list[dict[str, str]], settings: dict):
    """The policy for `settings` (`make_toy_task`'s arguments): the shipped one for `SHIPPED_SETTINGS`, else a new
    one warm-started on `train_problems`. Both leave torch's global random state alike (the model's
    initialisation), and the model in eval mode, as the warm start does."""
    model = _initial_policy(tokenizer, settings)
    if settings == SHIPPED_SETTINGS:
        load_model(model, SHIPPED_POLICY_FILE)
        return model.eval()
    return warm_start(model, tokenizer, train_problems, settings["warm_start_steps"], settings["seed"])


def train_shipped_policy() -> Qwen2ForCausalLM:
    """Trains the policy of `SHIPPED_SETTINGS` as `make_toy_task` would without the shipped file."""
    settings = SHIPPED_SETTINGS
    tokenizer = build_char_tokenizer()
    train_problems, _ = split_problems(settings["max_operand"], settings["held_out_fraction"], settings["seed"])
    model = _initial_policy(tokenizer, settings)
    return warm_start(model, tokenizer, train_problems, settings["warm_start_steps"], settings["seed"])


def _initial_policy(tokenizer: PreTrainedTokenizerFast, settings: dict) -> Qwen2ForCausalLM:
    return build_tiny_model(
        tokenizer,
        settings["seed"],
        hidden_size=settings["hidden_size"],
        num_layers=settings["num_layers"],
        num_attention_heads=settings["num_attention_heads"],
    )


def this_machine() -> dict[str, str]:
    """What decides the trained bits: the processor, torch's kernels and torch's version (not the thread count:
    one and two threads train the same bits)."""
    import torch

    return {"cpu": cpu_model(), "kernels": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def save_policy(model: Qwen2ForCausalLM, path: Path) -> None:
    """Writes the weights with the settings and the machine that trained them in the file's metadata."""
    save_model(model, str(path), metadata={"settings": json.dumps(SHIPPED_SETTINGS), **this_machine()})


def policy_metadata(path: Path = SHIPPED_POLICY_FILE) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as weights:
        return dict(weights.metadata())
