"""A character-level tokenizer built locally with `tokenizers`, so the toy task never touches a hub."""

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
CHARACTERS = "0123456789+-*=? "


def build_char_tokenizer(characters: str = CHARACTERS) -> PreTrainedTokenizerFast:
    """Returns a tokenizer with one token per character of `characters` plus pad, eos and unk tokens."""
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1, UNK_TOKEN: 2}
    for char in characters:
        vocab[char] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, unk_token=UNK_TOKEN, padding_side="left"
    )
