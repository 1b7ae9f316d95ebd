"""The policy every arm of a toy-task study starts from, and the trainer built around it."""

import atexit
import copy
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from trl_variants.toy import greedy_accuracy, make_toy_task

from .settings import TaskSettings


@dataclass
class Policy:
    """A task (prompts, answers, held-out problems) and the policy that all trainers start from."""

    task: object
    model: torch.nn.Module
    tokenizer: object

    def fresh_model(self) -> torch.nn.Module:
        return copy.deepcopy(self.model)

    def held_out_accuracy(self, model) -> float:
        return greedy_accuracy(model, self.tokenizer, self.task.eval_problems)


def load_policy(seed: int, settings: TaskSettings, model_path: str | None, use_vllm: bool = False) -> Policy:
    """The toy task for `seed`; its warm-started policy, or the model and tokenizer stored at `model_path`.

    With `use_vllm` and no `model_path`, the toy policy is built with 32-wide attention heads (2 heads; vLLM's CPU
    backend accepts no smaller) and loaded back from a temporary folder, since vLLM loads a model by its path.
    """
    task = make_toy_task(
        seed=seed,
        max_operand=settings.max_operand,
        warm_start_steps=0 if model_path else settings.warm_start_steps,
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_attention_heads=2 if use_vllm and model_path is None else 4,
    )
    if model_path is None and use_vllm:
        model_path = tempfile.mkdtemp(prefix="toy_policy_")
        atexit.register(shutil.rmtree, model_path, ignore_errors=True)
        task.model.save_pretrained(model_path)
        task.tokenizer.save_pretrained(model_path)
    if model_path is None:
        return Policy(task=task, model=task.model, tokenizer=task.tokenizer)
    if not os.path.isdir(model_path):
        raise ValueError(f"--model_path={model_path!r} is not a directory; pass a local model directory.")
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return Policy(task=task, model=model, tokenizer=tokenizer)


def build_trainer(trainer_class, config, policy: Policy, model=None, reward_funcs=None, callbacks=()):
    trainer = trainer_class(
        model if model is not None else policy.fresh_model(),
        reward_funcs if reward_funcs is not None else policy.task.reward_funcs,
        args=config,
        train_dataset=policy.task.train_dataset,
        processing_class=policy.tokenizer,
        callbacks=list(callbacks),
    )
    quiet(trainer)
    return trainer


def quiet(trainer) -> None:
    """The per-step log dictionaries would flood the output; they stay in `trainer.state.log_history`."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
