"""Held-out evaluation of a chat model on a reasoning-gym source: the sampled pass rate, k samples per prompt.

A sample passes when the task's verifier gives it full credit (score >= 1.0). Generation uses transformers'
`generate` on left-padded prompts rendered by the model's chat template, under its own seeded random stream, so an
evaluation neither depends on nor disturbs the training run's random state.
"""

import time
from dataclasses import dataclass, field

import torch

from .reasoning_gym_source import ReasoningGymSource

FULL_CREDIT = 1.0


@dataclass
class PassRate:
    """`pass_rate`: passing samples / all samples. `mean_score`: the verifier's mean score (partial credit
    counted). `per_prompt`: passing samples of each prompt, in the held-out set's order. `always_right` /
    `always_wrong`: prompts whose k samples all pass / all fail. `greedy`: one greedy sample per prompt instead of k
    sampled ones."""

    pass_rate: float
    mean_score: float
    prompts: int
    samples_per_prompt: int
    per_prompt: list[int] = field(repr=False)
    always_right: int
    always_wrong: int
    mean_completion_tokens: float
    truncated_fraction: float
    greedy: bool
    seconds: float


def sampled_pass_rate(
    model,
    tokenizer,
    held_out: ReasoningGymSource,
    samples_per_prompt: int = 4,
    greedy: bool = False,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    batch_size: int = 64,
    seed: int = 0,
    progress=None,
) -> PassRate:
    """The pass rate of `model` on every prompt of `held_out` (a `ReasoningGymSource`), `samples_per_prompt`
    samples each at `temperature` (or one greedy sample each with `greedy=True`), completions of at most
    `max_new_tokens` tokens, generated `batch_size` sequences at a time. `progress`, when given, is called after
    each batch with the samples done so far and the samples in all."""
    if samples_per_prompt < 1:
        raise ValueError(f"sampled_pass_rate: samples_per_prompt={samples_per_prompt}; expected an integer >= 1.")
    started = time.perf_counter()
    k = 1 if greedy else samples_per_prompt
    rows = list(held_out.dataset)
    texts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) for row in rows]
    jobs = [(position, text) for position, text in enumerate(texts) for _ in range(k)]
    scores: list[list[float]] = [[] for _ in rows]
    lengths, truncated = [], 0
    was_training = model.training
    model.eval()
    padding_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(jobs), batch_size):
                batch = jobs[start : start + batch_size]
                inputs = tokenizer([text for _, text in batch], return_tensors="pt", padding=True)
                inputs = inputs.to(model.device)
                output = model.generate(
                    **inputs,
                    max_new_tokens=max_new_tokens,
                    do_sample=not greedy,
                    temperature=temperature if not greedy else None,
                    top_p=None,
                    top_k=None,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                )
                completions = output[:, inputs["input_ids"].shape[1] :]
                for (position, _), completion_ids in zip(batch, completions, strict=True):
                    length, ended = _completion_length(completion_ids, tokenizer.eos_token_id)
                    lengths.append(length)
                    truncated += not ended
                    text = tokenizer.decode(completion_ids[:length], skip_special_tokens=True)
                    index = rows[position]["reasoning_gym_index"]
                    scores[position].append(held_out.reward_func.score(text, index))
                if progress is not None:
                    progress(start + len(batch), len(jobs))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    per_prompt = [sum(score >= FULL_CREDIT for score in prompt_scores) for prompt_scores in scores]
    samples = len(rows) * k
    return PassRate(
        pass_rate=sum(per_prompt) / samples,
        mean_score=sum(map(sum, scores)) / samples,
        prompts=len(rows),
        samples_per_prompt=k,
        per_prompt=per_prompt,
        always_right=sum(count == k for count in per_prompt),
        always_wrong=sum(count == 0 for count in per_prompt),
        mean_completion_tokens=sum(lengths) / samples,
        truncated_fraction=truncated / samples,
        greedy=greedy,
        seconds=round(time.perf_counter() - started, 1),
    )


def _completion_length(completion_ids: torch.Tensor, eos_token_id: int) -> tuple[int, bool]:
    """Tokens up to and including the first end token, and whether there was one. The end token is also the pad
    token, so everything after the first one is padding."""
    ends = (completion_ids == eos_token_id).nonzero()
    if len(ends) == 0:
        return len(completion_ids), False
    return int(ends[0]) + 1, True
