"""The toy tasks the dynamic-sampling benchmark trains on (and the frozen variant comparison and defaults benchmark
trained on), behind one interface with difficulty levels.

- `graded`: `trl_variants.toy.graded.make_graded_task`, problems of several difficulty levels whose completions
  (optional working, a marker, the answer) can reach the length limit.
- `addition`: the original one-digit-addition `ToyTask`, reported as a single level 0.

A task is warm-started once per seed and its weights saved; every arm of that seed then rebuilds the task without
warm start (the data depend only on the seed) and loads those weights, so all arms start from the same policy even
when they run in different worker processes.
"""

import os
from collections import Counter
from dataclasses import dataclass

import torch

from trl_variants.toy import make_toy_task


TASKS = ("graded", "addition")
# A setting left at this value takes the task's own default (the graded task fixes its warm start and length).
TASK_DEFAULT = -1


@dataclass
class LevelledTask:
    """What the comparison needs of a task: the policy, the data, the reward and a per-level held-out score."""

    name: str
    task: object  # the underlying GradedTask or ToyTask
    levels: list[int]
    level_counts: dict[int, int]  # held-out problems per level, to weigh per-level accuracy into the overall one
    max_completion_length: int

    def __getattr__(self, name: str):
        """`model`, `tokenizer`, `train_dataset`, `reward_funcs`, `eval_problems`: the underlying task's."""
        if name in ("model", "tokenizer", "train_dataset", "reward_funcs", "eval_problems"):
            return getattr(self.task, name)
        raise AttributeError(name)

    def accuracy_by_level(self, model) -> dict[int, float]:
        """Greedy held-out accuracy per level, in one batched pass per level (the task's own evaluation)."""
        if self.name == "addition":
            return {0: self.task.held_out_accuracy(model)}
        return {int(level): value for level, value in self.task.held_out_accuracy_by_level(model).items()}

    def overall_accuracy(self, by_level: dict[int, float]) -> float:
        total = sum(self.level_counts.values())
        return sum(by_level[level] * count for level, count in self.level_counts.items()) / total

    def eval_fingerprint(self) -> list[str]:
        return [problem["prompt"] for problem in self.eval_problems]


def build_task(name: str, seed: int, settings, warm_start: bool = True) -> LevelledTask:
    """The task for `seed`; without `warm_start` the policy is left untrained (weights are loaded afterwards)."""
    if name == "addition":
        task = make_toy_task(
            seed=seed,
            max_operand=settings.max_operand,
            warm_start_steps=settings.warm_start_steps if warm_start else 0,
            hidden_size=settings.hidden_size,
            num_layers=settings.num_layers,
        )
        return LevelledTask(name, task, [0], {0: len(task.eval_problems)}, settings.max_completion_length)
    if name != "graded":
        raise ValueError(f"task={name!r} is not allowed; expected one of {TASKS}.")
    try:
        from trl_variants.toy.graded import make_graded_task
    except ImportError as error:
        raise SystemExit(
            f"--task graded needs trl_variants.toy.graded ({error}); use --task addition until it is installed."
        ) from error
    kwargs = {"seed": seed, "hidden_size": settings.hidden_size, "num_layers": settings.num_layers}
    if not warm_start:
        kwargs["warm_start_steps"] = 0
    elif settings.warm_start_steps != TASK_DEFAULT:
        kwargs["warm_start_steps"] = settings.warm_start_steps
    task = make_graded_task(**kwargs)
    counts = Counter(int(problem["level"]) for problem in task.eval_problems)
    length = task.max_completion_length if settings.max_completion_length == TASK_DEFAULT else settings.max_completion_length
    return LevelledTask(name, task, sorted(int(level) for level in task.levels), dict(sorted(counts.items())), length)


def warm_start_and_save(name: str, seed: int, settings, path: str) -> dict:
    """Builds and warm-starts the task of `seed` and saves its policy; returns what the arms need to know."""
    task = build_task(name, seed, settings)
    by_level = task.accuracy_by_level(task.model)
    torch.save({"state_dict": task.model.state_dict(), "eval_prompts": task.eval_fingerprint()}, path)
    return {"seed": seed, "levels": task.levels, "level_counts": task.level_counts,
            "max_completion_length": task.max_completion_length, "warm_accuracy_by_level": by_level}


def load_warm_task(name: str, seed: int, settings, path: str) -> LevelledTask:
    """The task of `seed` with the policy saved by `warm_start_and_save`."""
    task = build_task(name, seed, settings, warm_start=False)
    saved = torch.load(path, weights_only=True)
    if saved["eval_prompts"] != task.eval_fingerprint():
        raise RuntimeError(f"seed {seed}: the held-out problems differ from the warm-started task's; not comparable.")
    task.model.load_state_dict(saved["state_dict"])
    if torch.cuda.is_available():
        task.model.to("cuda")
    return task


def warm_weights_path(scratch_dir: str, seed: int) -> str:
    return os.path.join(scratch_dir, f"warm_policy_seed{seed}.pt")
