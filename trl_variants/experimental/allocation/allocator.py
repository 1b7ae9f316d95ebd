"""`Allocator`: the dynamic sampler's allocation mode (`dynamic_sampling_allocation=True`; experimental, off by
default, not measured on a model: docs/allocation.md). It follows Knapsack RL's value per completion and
Reinforce-Ada's rounds and fixed-size balanced groups through the pure decisions of `decisions.py`, whose docstring
gives the formula: a prompt's score is `P_mixed(plan) / plan`, the expected trained groups per completion of its
plan, with `P_mixed(d) = 1 - [w = 0] E[q**d] - [r = 0] E[(1 - q)**d]`, `q ~ Beta(alpha + r, beta + w)`.

A step (`sample`, called by `DynamicSampler.sample_batch` in place of its own rounds):

1. Candidates: the dataloader batch's prompts, then `CANDIDATES_PER_GROUP - 1` times as many refill prompts (dataset
   indices, drawn alike on every process), each scored with its posterior from earlier steps.
2. Rounds: `allocate_round` grants whole plans, best score first, within a budget of `G` completions per group the
   sampler would request without allocation (`groups_to_request`: the informative groups still missing over the
   share of generated prompts that finished, this step's or earlier steps', with its margin and cap): `G` to a
   prompt not generated yet this step, `CHUNK` more to one still all right or all wrong while its score beats the
   others' and an unseen prompt's. When the grants fall short of the budget, refill
   prompts join the candidates (`CANDIDATES_PER_GROUP` per group short) and the round is allocated again. The first
   granted prompt gets up to `P - 1` more completions so that the round splits evenly over the `P` processes
   (`call_order`). Every round's rows come back gathered, so every process holds every prompt's completions and
   takes the same decisions; nothing is drawn at random here.
3. The rounds stop once `needed` prompts are finished (mixed, at least `G` completions), when nothing more is
   granted, or after `dynamic_sampling_max_rounds`. If fewer than `needed` prompts were generated at all, one more
   round gives `G` completions to that many prompts not generated yet (best score first; at least one prompt a
   step), so that the batch can be filled as `dynamic_sampling_on_exhausted` says.
4. Groups: every generated prompt forms one group of exactly `G` of its completions (`balanced_group`: up to `G // 2`
   right, the rest wrong, earliest first), in the order the prompts were first generated; the sampler's
   `decide_round` keeps, carries and fills from these groups as without allocation. TRL's advantage and loss run
   unchanged on them.
5. The posterior (`PassRatePosterior`, fading as `skip_memory_epochs` says) records each generated prompt's right and
   scored completions of the step, once, after the step's decisions. Checkpoints save its arrays (`POSTERIOR_FILE`).

A prompt is right or wrong by `completion_outcomes` over all of its completions of the step, on the sampling metric.
"""

import os
from dataclasses import dataclass, field

import numpy as np
from transformers.utils import logging

from ..prompt_skipping.posterior import PassRatePosterior, posterior_decays
from .decisions import (
    allocate_round,
    balanced_group,
    completion_outcomes,
    finished_prompts,
    plan_scores,
)

logger = logging.get_logger(__name__)

POSTERIOR_FILE = "dynamic_sampling_allocation_posterior.npz"
# Candidate prompts scored per trained group (the simulation in benchmarks/allocation_study/simulate.py used 4).
CANDIDATES_PER_GROUP = 4
# Completions granted at a time to a prompt still all right or all wrong after its first G.
CHUNK = 2
# A prompt gets at most this many times G completions in a step (padding aside).
MAX_DRAWS_PER_GROUP = 4
# The metric whose presence in a run's logs makes its checkpoints need `POSTERIOR_FILE`.
CANDIDATES_METRIC = "dynamic_sampling/allocation_candidates"


@dataclass
class Candidate:
    """A candidate prompt of the step: its dataset index, its posterior from earlier steps, and its completions of
    the step (rows, sampling scores) with the generation-order number of the first."""

    key: int
    alpha: float
    beta: float
    rows: list = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    first_row: int = -1
    continued: bool = False


class Allocator:
    """The allocation mode's state (the posterior) and its step (module docstring). `refill` is the dynamic sampler's
    map-style refill source; `num_processes` the processes a round splits over."""

    def __init__(self, args, num_generations: int, refill, num_processes: int):
        dataset_size = getattr(refill, "dataset_size", None)
        if dataset_size is None:
            raise ValueError(
                "dynamic_sampling_allocation=True is not allowed with a streaming train_dataset; expected a map-style "
                "dataset (the posterior is kept per dataset index), or dynamic_sampling_allocation=False."
            )
        self.args, self.group_size, self.refill, self.num_processes = args, num_generations, refill, num_processes
        decays = posterior_decays(args.skip_memory_epochs, dataset_size, args.generation_batch_size // num_generations)
        self.posterior = PassRatePosterior(dataset_size, *decays)
        self.candidates: list[Candidate] = []
        self.step_metrics: dict[str, float] = {}

    def sample(self, batch_keys: list[int], needed: int, step: int, run_round, request):
        """The step's groups (each `G` rows, in generation order), every row generated, and the rounds run.
        `batch_keys`: the dataset index of each dataloader group; `run_round(sources)` generates one row per source
        (all processes' rows, gathered) and returns the rows and their scores on the sampling metric;
        `request(missing, rate)` sizes a round, in groups, for `missing` informative groups at the share `rate` of
        generated prompts that finished (`None`: none generated yet this step)."""
        group_size, args = self.group_size, self.args
        self.candidates = []
        self.add(batch_keys + self.refill.draw((CANDIDATES_PER_GROUP - 1) * len(batch_keys)), step)
        generated, rounds = [], 0
        while rounds < args.dynamic_sampling_max_rounds:
            right, wrong = self.counts()
            finished, tried = int(finished_prompts(right, wrong, group_size).sum()), int((right + wrong > 0).sum())
            budget = request(needed - finished, finished / tried if tried else None) * group_size
            granted = self.allocate(right, wrong, budget)
            if budget and granted.sum() < budget:
                self.add(self.refill.draw(CANDIDATES_PER_GROUP * -(-(budget - int(granted.sum())) // group_size)), step)
                granted = self.allocate(*self.counts(), budget)
            if not granted.any():
                break
            rounds += 1
            generated += self.generate(granted, run_round, len(generated))
        # At least one prompt, so that a step whose batch is all carried groups still measures something.
        missing = max(needed, 1) - sum(bool(candidate.rows) for candidate in self.candidates)
        if missing > 0:
            fresh = [i for i, candidate in enumerate(self.candidates) if not candidate.rows]
            if len(fresh) < missing:
                self.add(self.refill.draw(missing - len(fresh)), step)
                fresh = [i for i, candidate in enumerate(self.candidates) if not candidate.rows]
            score = plan_scores(*self.parameters(fresh), np.zeros(len(fresh)), np.zeros(len(fresh)), group_size,
                                CHUNK, MAX_DRAWS_PER_GROUP * group_size)[1]  # fmt: skip
            granted = np.zeros(len(self.candidates), dtype=np.int64)
            granted[[fresh[i] for i in np.lexsort((np.arange(len(fresh)), -score))[:missing]]] = group_size
            rounds += 1
            generated += self.generate(granted, run_round, len(generated))
        return self.finish_step(step, len(generated)), generated, rounds

    def add(self, keys: list[int], step: int) -> None:
        alpha, beta = self.posterior.parameters(keys, step) if keys else ([], [])
        self.candidates += [Candidate(key, a, b) for key, a, b in zip(keys, np.asarray(alpha).tolist(),
                                                                      np.asarray(beta).tolist(), strict=True)]

    def parameters(self, positions=None) -> tuple[np.ndarray, np.ndarray]:
        chosen = self.candidates if positions is None else [self.candidates[i] for i in positions]
        return np.array([c.alpha for c in chosen]), np.array([c.beta for c in chosen])

    def outcomes(self, candidate: Candidate) -> tuple[np.ndarray, np.ndarray]:
        return completion_outcomes(np.array(candidate.scores, dtype=np.float64), self.args.dynamic_sampling_tolerance)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's right and wrong completions so far this step."""
        right, wrong = np.zeros(len(self.candidates)), np.zeros(len(self.candidates))
        for i, candidate in enumerate(self.candidates):
            if candidate.rows:
                is_right, scored = self.outcomes(candidate)
                right[i], wrong[i] = is_right.sum(), (scored & ~is_right).sum()
        return right, wrong

    def allocate(self, right: np.ndarray, wrong: np.ndarray, budget: int) -> np.ndarray:
        if budget == 0:
            return np.zeros(len(self.candidates), dtype=np.int64)
        return allocate_round(*self.parameters(), right, wrong, budget, self.group_size, CHUNK,
                              MAX_DRAWS_PER_GROUP * self.group_size)  # fmt: skip

    def generate(self, granted: np.ndarray, run_round, first_number: int) -> list:
        """Generates the granted completions (padded so that the round splits evenly over the processes) and files
        each row under its candidate; returns the round's rows."""
        owners = [int(i) for i in np.flatnonzero(granted) for _ in range(int(granted[i]))]
        owners += [owners[0]] * (-len(owners) % self.num_processes)
        for i in set(owners):
            self.candidates[i].continued = self.candidates[i].continued or bool(self.candidates[i].rows)
        rows, scores = run_round([self.candidates[i].key for i in owners])
        for number, (owner, row, score) in enumerate(zip(owners, rows, scores.tolist(), strict=True)):
            candidate = self.candidates[owner]
            candidate.first_row = candidate.first_row if candidate.rows else first_number + number
            candidate.rows.append(row)
            candidate.scores.append(score)
        return rows

    def finish_step(self, step: int, completions: int) -> list[list]:
        """The step's groups, `G` rows per generated prompt in the order they were first generated; records the
        step's counts in the posterior and its metrics (`log`)."""
        generated = sorted((c for c in self.candidates if c.rows), key=lambda candidate: candidate.first_row)
        groups, right, scored = [], [], []
        for candidate in generated:
            is_right, is_scored = self.outcomes(candidate)
            groups.append([candidate.rows[i] for i in balanced_group(is_right, self.group_size)])
            right.append(int(is_right.sum()))
            scored.append(int(is_scored.sum()))
        self.posterior.record([c.key for c in generated], right, scored, step)
        wrong = np.array(scored) - np.array(right)
        finished = int(finished_prompts(right, wrong, self.group_size).sum()) if generated else 0
        self.step_metrics = {
            CANDIDATES_METRIC: len(self.candidates),
            "dynamic_sampling/allocation_generated_prompts": len(generated),
            "dynamic_sampling/allocation_continued_prompts": sum(c.continued for c in generated),
            "dynamic_sampling/allocation_generated_completions": completions,
        }
        if finished:
            self.step_metrics["dynamic_sampling/allocation_completions_per_informative_group"] = completions / finished
        self.candidates = []
        return groups

    def log(self, metrics) -> None:
        for name, value in self.step_metrics.items():
            metrics[name].append(float(value))

    # Checkpointing: the posterior's arrays, in a file of their own.

    def save(self, checkpoint_dir: str) -> None:
        np.savez_compressed(os.path.join(checkpoint_dir, POSTERIOR_FILE), **self.posterior.arrays())

    def load(self, checkpoint_dir: str) -> None:
        path = os.path.join(checkpoint_dir, POSTERIOR_FILE)
        if not os.path.isfile(path):
            logger.warning(
                f"dynamic_sampling_allocation: the checkpoint {checkpoint_dir} has no posterior ({POSTERIOR_FILE}); "
                "it was saved without allocation, so the posterior starts empty."
            )
            return
        with np.load(path) as arrays:
            self.posterior.load_arrays(arrays)
