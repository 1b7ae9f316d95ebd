"""`PromptSkipper`: skips prompts predicted degenerate before generating them (`skip_degenerate_prompts=True`,
experimental and off by default: the real-model study could not show it non-inferior). The rules are in `posterior`
(`skip_predictor="posterior"`) and `streak` (`"streak"`); docs/dynamic_sampling.md, "Skipping prompts predicted
degenerate", explains them.

The dynamic sampler owns one and calls `replace` on the dataloader batch's gathered prompt keys, `draw` for refill
prompts, `record` with every process's groups of the step, and `state`/`save`/`load` with checkpoints. Every
decision comes from gathered data and a generator seeded by the run's seed and a draw counter, so every process holds
the same history and takes the same decisions.
"""

import os

import numpy as np
import torch
from transformers.utils import logging

from .posterior import PassRatePosterior, group_successes, posterior_decays, thompson_generate_probabilities
from .streak import INFORMATIVE, INITIAL_EXPLORE_PROBABILITY, PromptHistory, adapt_explore_probability
from .streak import explore_probabilities, group_outcomes, pick_prompts

logger = logging.get_logger(__name__)

HISTORY_FILE = "dynamic_sampling_prompt_history.npz"
# Mixed into the seed of the skip decisions' generator, so they draw a stream of their own.
SKIP_STREAM = 0x5C1B


class PromptSkipper:
    """The history of every prompt's groups and the skip rule's state. `refill` is the dynamic sampler's refill
    source (its `draw` gives candidate prompts; on a stream its `rows_read` sizes the posterior's memory),
    `key_space` the number of prompt keys."""

    def __init__(self, args, num_generations: int, refill, key_space: int, streaming: bool):
        self.args, self.num_generations, self.refill, self.streaming = args, num_generations, refill, streaming
        self.key_space, self.draws, self.budget_warned = key_space, 0, False
        self.posterior = self.history = None
        if args.skip_predictor == "posterior":
            self.posterior = PassRatePosterior(key_space, decay_right=1.0, decay_wrong=1.0)
            self.set_posterior_memory()
        else:
            self.history = PromptHistory(key_space)
        self.explore_p = {"easy": INITIAL_EXPLORE_PROBABILITY, "hard": INITIAL_EXPLORE_PROBABILITY}
        self.start_step()

    @property
    def arrays_owner(self):
        """The active predictor's per-row arrays: the pass-rate posterior or the streak history."""
        return self.posterior if self.posterior is not None else self.history

    def set_posterior_memory(self) -> None:
        """Evidence half-life in steps: `skip_memory_epochs` passes over the dataset at this run's batch."""
        rows = self.refill.rows_read if self.streaming else self.key_space
        batch_groups = self.args.generation_batch_size // self.num_generations
        decays = posterior_decays(self.args.skip_memory_epochs, rows, batch_groups)
        self.posterior.decay_right, self.posterior.decay_wrong = decays

    def start_step(self) -> None:
        # Per step, in generation order: each group's prompt key and whether it could have been skipped.
        self.step_keys: list[int] = []
        self.step_candidates: list[bool] = []
        self.step_skipped = 0

    def replace(self, first: list[int], step: int) -> list[int]:
        """The keys of the dataloader batch's groups (every process's, in order) with those predicted degenerate
        replaced by refill prompts that passed the rule."""
        self.start_step()
        return self.pick(first, len(first), step).prompts

    def draw(self, num_groups: int, step: int) -> list[int]:
        return self.pick([], num_groups, step).prompts

    def forget(self, count: int) -> None:
        """Takes back the last `count` picked prompts, which will not be generated (a stream ran dry mid-round)."""
        if count:
            del self.step_keys[-count:]
            del self.step_candidates[-count:]

    def pick(self, first: list[int], needed: int, step: int):
        """`first` (then refill draws) walked through the skip rule until `needed` prompts are kept
        (`streak.PickedPrompts`)."""
        args = self.args
        rng = np.random.default_rng([args.seed, SKIP_STREAM, self.draws])
        self.draws += 1
        floor, p = args.skip_min_explore_probability, self.explore_p
        generate_probability = (
            (lambda keys: thompson_generate_probabilities(self.posterior, keys, step, self.num_generations, floor, rng))
            if self.posterior is not None
            else (lambda keys: explore_probabilities(self.history, keys, p["easy"], p["hard"], floor))
        )
        picked = pick_prompts(first, self.refill.draw, needed, generate_probability, rng)
        if picked.forced and not self.budget_warned:
            self.budget_warned = True
            logger.warning(
                f"skip_degenerate_prompts: {len(picked.forced)} of {needed} prompts were generated although the "
                f"history predicts them degenerate: too few others passed the skip rule. Most of the dataset looks "
                "all correct or all wrong to the policy; training goes on, but consider easier or harder prompts. "
                "This warning is shown once."
            )
        self.step_keys.extend(picked.prompts)
        self.step_candidates.extend(picked.candidates)
        self.step_skipped += len(picked.skipped)
        return picked

    def record(self, scores: torch.Tensor, informative: torch.Tensor, step: int, metrics) -> None:
        """Updates the history from every group generated this step (`scores`: `(groups, G)`, in generation order)
        with each group's outcome code, completions right and completions scored (`group_outcomes`,
        `group_successes`), adapts p and logs the skipping metrics into `metrics` (TRL's train metrics)."""
        outcomes = group_outcomes(scores, informative)
        right, scored = group_successes(scores, informative)
        informative = outcomes == INFORMATIVE
        if len(self.step_keys) != len(informative):
            raise RuntimeError(
                f"skip_degenerate_prompts: {len(informative)} groups were generated but {len(self.step_keys)} "
                "prompts were picked; the history cannot be matched to the groups."
            )
        args = self.args
        if self.posterior is not None:
            if self.streaming:  # the stream's length becomes known as it is read
                self.set_posterior_memory()
            self.posterior.record(self.step_keys, right, scored, step)
        else:
            self.history.record(self.step_keys, outcomes)
            seen = len(outcomes)
            target = args.skip_target_degenerate_share / 2
            for name, code in (("easy", 1), ("hard", 2)):
                share = float((outcomes == code).sum()) / seen
                self.explore_p[name] = adapt_explore_probability(
                    self.explore_p[name], share, target, args.skip_probability_step, args.skip_min_explore_probability
                )
        metrics["dynamic_sampling/skipped_prompts"].append(float(self.step_skipped))
        explored = np.asarray(self.step_candidates, dtype=bool)
        if explored.any():
            metrics["dynamic_sampling/skip_candidates_informative_frac"].append(float(informative[explored].mean()))
        if self.history is not None:
            metrics["dynamic_sampling/explore_probability_easy"].append(self.explore_p["easy"])
            metrics["dynamic_sampling/explore_probability_hard"].append(self.explore_p["hard"])
        self.start_step()

    # Checkpointing: the arrays go to a binary file, the rest into the dynamic sampler's JSON state.

    def state(self) -> dict:
        predictor, explore_p = self.args.skip_predictor, dict(self.explore_p)
        return {"predictor": predictor, "explore_p": explore_p, "draws": self.draws, "history_file": HISTORY_FILE}

    def save(self, checkpoint_dir: str) -> None:
        np.savez_compressed(os.path.join(checkpoint_dir, HISTORY_FILE), **self.arrays_owner.arrays())

    def load(self, state: dict | None, checkpoint_dir: str) -> None:
        path = os.path.join(checkpoint_dir, HISTORY_FILE)
        if state is None or not os.path.isfile(path):
            logger.warning(
                f"skip_degenerate_prompts: the checkpoint {checkpoint_dir} has no prompt history ({HISTORY_FILE}); "
                "it was saved without skipping, so the history starts empty."
            )
            return
        # Checkpoints written before the posterior existed hold the streak history and name no predictor.
        saved_predictor = state.get("predictor", "streak")
        if saved_predictor != self.args.skip_predictor:
            raise ValueError(
                f"skip_predictor={self.args.skip_predictor!r}, but the checkpoint {checkpoint_dir} holds the history "
                f"of skip_predictor={saved_predictor!r}; resume with skip_predictor={saved_predictor!r}."
            )
        with np.load(path) as arrays:
            self.arrays_owner.load_arrays(arrays)
        self.explore_p, self.draws = dict(state["explore_p"]), int(state["draws"])
