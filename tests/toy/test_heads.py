"""The toy policy's attention-head option: the default stays 4 heads of 16; 2 heads of 32 suit vLLM's CPU backend."""

import pytest

from trl_variants.toy import build_char_tokenizer, build_tiny_model


def test_default_and_vllm_head_layouts():
    tokenizer = build_char_tokenizer()
    default = build_tiny_model(tokenizer, seed=0).config
    assert (default.num_attention_heads, default.num_key_value_heads) == (4, 2)
    assert default.hidden_size // default.num_attention_heads == 16
    for_vllm = build_tiny_model(tokenizer, seed=0, num_attention_heads=2).config
    assert (for_vllm.num_attention_heads, for_vllm.num_key_value_heads) == (2, 1)
    assert for_vllm.hidden_size // for_vllm.num_attention_heads == 32


@pytest.mark.parametrize("heads", [0, 1, 3, 6])
def test_head_counts_that_cannot_be_built_are_refused(heads):
    with pytest.raises(ValueError, match=rf"num_attention_heads must be even.*hidden_size=64, got {heads}\."):
        build_tiny_model(build_char_tokenizer(), seed=0, num_attention_heads=heads)
