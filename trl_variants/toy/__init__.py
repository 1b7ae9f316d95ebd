"""An embedded, offline toy task: a tiny policy that learns addition, `a+b=` with operands up to
`max_operand` (9 by default: one-digit numbers).

It stands in for a base model and a math dataset wherever the package must run without network or GPU: tests,
the demo job and the benchmarks. Everything is built locally and is deterministic under a seed.
"""

from dataclasses import dataclass

from datasets import Dataset
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from .data import split_problems, to_dataset
from .model import build_tiny_model, greedy_accuracy, warm_start
from .policy import warm_policy
from .reward import parse_answer, toy_accuracy_reward
from .tokenizer import build_char_tokenizer

__all__ = [
    "ToyTask",
    "build_char_tokenizer",
    "build_tiny_model",
    "greedy_accuracy",
    "make_toy_task",
    "parse_answer",
    "toy_accuracy_reward",
    "warm_start",
]


@dataclass
class ToyTask:
    model: Qwen2ForCausalLM
    tokenizer: PreTrainedTokenizerFast
    train_dataset: Dataset
    eval_dataset: Dataset
    train_problems: list[dict[str, str]]
    eval_problems: list[dict[str, str]]

    @property
    def reward_funcs(self):
        return [toy_accuracy_reward]

    def held_out_accuracy(self, model=None) -> float:
        return greedy_accuracy(model or self.model, self.tokenizer, self.eval_problems)


def make_toy_task(
    seed: int = 0,
    warm_start_steps: int = 100,
    max_operand: int = 9,
    held_out_fraction: float = 0.2,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_attention_heads: int = 4,
) -> ToyTask:
    """Builds the tokenizer, the warm-started policy and the train/held-out prompt datasets. With the defaults the
    policy is loaded from the package (`policy.py`), with any other setting warm-started anew; `num_attention_heads=2`
    builds one whose head size vLLM's CPU backend accepts (`build_tiny_model`)."""
    settings = dict(
        seed=seed, warm_start_steps=warm_start_steps, max_operand=max_operand, held_out_fraction=held_out_fraction,
        hidden_size=hidden_size, num_layers=num_layers, num_attention_heads=num_attention_heads,
    )  # fmt: skip
    tokenizer = build_char_tokenizer()
    train_problems, eval_problems = split_problems(max_operand, held_out_fraction, seed)
    model = warm_policy(tokenizer, train_problems, settings)
    return ToyTask(
        model=model,
        tokenizer=tokenizer,
        train_dataset=to_dataset(train_problems),
        eval_dataset=to_dataset(eval_problems),
        train_problems=train_problems,
        eval_problems=eval_problems,
    )
