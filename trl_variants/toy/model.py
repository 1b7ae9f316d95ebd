"""A tiny Qwen2-architecture policy built from a config, and its supervised warm start.

RL from a random initialisation on this task collapses to a fixed answer and never recovers; a base model
normally arrives with partial skill. The warm start gives the toy policy that partial skill in a few seconds.
"""

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_attention_heads: int = 4,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized for the character vocabulary.

    Each key/value head serves two query heads. `num_attention_heads=2` gives 32-wide heads, the smallest that
    vLLM's CPU attention backend accepts (it needs a head size of 32, 64, 80, ...).
    """
    if num_attention_heads < 2 or num_attention_heads % 2 or hidden_size % num_attention_heads:
        raise ValueError(
            f"build_tiny_model: num_attention_heads must be even, at least 2 and divide hidden_size={hidden_size}, "
            f"got {num_attention_heads}."
        )
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads // 2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id
    )
    return model


def _supervised_batch(tokenizer, problems: list[dict[str, str]]) -> dict[str, torch.Tensor]:
    """Prompt + answer + eos, right-padded, with the loss on the answer and eos tokens only."""
    rows = []
    for problem in problems:
        prompt_ids = tokenizer(problem["prompt"], add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(problem["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, row_labels) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(ids)] = torch.tensor(row_labels)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def warm_start(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    problems: list[dict[str, str]],
    steps: int,
    seed: int,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
) -> Qwen2ForCausalLM:
    """Trains `model` in place for `steps` supervised steps on random mini-batches of `problems`."""
    if steps < 0:
        raise ValueError(f"warm_start: steps must be >= 0, got {steps}.")
    if steps == 0:
        return model
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    for _ in range(steps):
        picks = torch.randint(len(problems), (batch_size,), generator=generator).tolist()
        loss = model(**_supervised_batch(tokenizer, [problems[i] for i in picks])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model


@torch.no_grad()
def greedy_accuracy(
    model, tokenizer, problems: list[dict[str, str]], max_new_tokens: int = 4, parse_answer=None
) -> float:
    """Share of `problems` whose greedy completion is exactly right under `parse_answer` (the reward's own rule;
    by default the addition task's)."""
    return sum(greedy_correct(model, tokenizer, problems, max_new_tokens, parse_answer)) / len(problems)


@torch.no_grad()
def greedy_correct(
    model, tokenizer, problems: list[dict[str, str]], max_new_tokens: int = 4, parse_answer=None
) -> list[bool]:
    """Whether each problem's greedy completion is exactly right under `parse_answer`."""
    if parse_answer is None:
        from .reward import parse_answer

    was_training = model.training
    model.eval()
    encoded = tokenizer([p["prompt"] for p in problems], return_tensors="pt", padding=True, add_special_tokens=False)
    encoded = {key: value.to(model.device) for key, value in encoded.items()}
    output = model.generate(**encoded, do_sample=False, max_new_tokens=max_new_tokens)
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train(was_training)
    return [parse_answer(text) == p["answer"] for text, p in zip(texts, problems, strict=True)]
