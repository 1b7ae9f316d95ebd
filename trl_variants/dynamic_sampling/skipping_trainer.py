"""Trainer glue for skipping prompts predicted degenerate (`skip_degenerate_prompts=True`); the rules are in
`posterior` (`skip_predictor="posterior"`) and `skipping` (`"streak"`).

`DynamicSamplingMixin` calls five hooks: `_skip_predicted_degenerate` on the dataloader batch's gathered indices,
`_draw_prompt_indices` for refill prompts, `_outcome_summaries` on each process's own scored groups,
`_record_prompt_outcomes` once a step's summaries are gathered, and the state save/load. Everything is decided
from gathered data and from a random generator seeded by the run's seed and a draw counter, so every process holds
the same history and takes the same decisions. The history needs every group's outcome, so with skipping on each
round's gather carries three small integers per group (outcome, completions right, completions scored): per group,
never per completion; without skipping nothing of the kind is gathered.

Dataset rows carry no index in TRL, and none is added to them: the train sampler records the indices it yields, and
each dataloader batch is paired with its rows' indices as it arrives (`row_indices`), so `_prepare_inputs`, reward
functions and TRL see the dataset's own columns; only the indices cross processes. A streaming dataset has no
index: its prompts are keyed by a hash of their content (`stream.prompt_key`), and the posterior's memory is
counted in passes of the refill reader over the stream (the rows read so far until a first pass is complete).
"""

import os

import numpy as np
import torch
from accelerate.data_loader import DataLoaderDispatcher
from transformers.utils import logging

from .posterior import (
    RIGHT_MEMORY_FACTOR,
    PassRatePosterior,
    group_successes,
    half_life_decay,
    thompson_generate_probabilities,
)
from .skipping import (
    INFORMATIVE,
    INITIAL_EXPLORE_PROBABILITY,
    PromptHistory,
    adapt_explore_probability,
    explore_probabilities,
    group_outcomes,
    pick_prompts,
)
from .row_indices import BatchRowIndices, RecordingSampler
from .stream import STREAM_KEY_SPACE, prompt_key, row_prompt

logger = logging.get_logger(__name__)

HISTORY_FILE = "dynamic_sampling_prompt_history.npz"
# Mixed into the seed of the skip decisions' generator, so they draw a stream of their own.
_SKIP_STREAM = 0x5C1B


class PromptSkippingMixin:
    """Skips prompts whose history says they are degenerate, before generating them. Used by
    `DynamicSamplingMixin`; every hook is a no-op when skipping is off."""

    def _setup_prompt_skipping(self) -> None:
        args = self.args
        self._prompt_history = None
        self._pass_posterior = None
        if not self._options.skip_degenerate_prompts or self._refill_sampler is None:
            return
        key_space = STREAM_KEY_SPACE if self._streaming else len(self.train_dataset)
        if args.skip_predictor == "posterior":
            self._pass_posterior = PassRatePosterior(key_space, decay_right=1.0, decay_wrong=1.0)
            self._set_posterior_memory()
        else:
            self._prompt_history = PromptHistory(key_space)
        self._explore_p = {"easy": INITIAL_EXPLORE_PROBABILITY, "hard": INITIAL_EXPLORE_PROBABILITY}
        self._skip_draws = 0
        self._skip_budget_warned = False
        self._reset_step_skipping()

    def _set_posterior_memory(self) -> None:
        """Evidence half-life in steps: `skip_memory_epochs` passes over the dataset at this run's batch."""
        rows = self._refill_sampler.rows_read if self._streaming else len(self.train_dataset)
        batch_groups = max(1, self.args.generation_batch_size // self.num_generations)
        wrong_half_life = self.args.skip_memory_epochs * max(rows, batch_groups) / batch_groups
        self._pass_posterior.decay_right = half_life_decay(RIGHT_MEMORY_FACTOR * wrong_half_life)
        self._pass_posterior.decay_wrong = half_life_decay(wrong_half_life)

    def _row_key(self, row: dict) -> int:
        """The history key of a dataloader row: its dataset index, or its prompt's hash on a stream (-1: none)."""
        if self._streaming:
            return prompt_key(row_prompt(row))
        batch = getattr(self, "_batch_row_indices", None)
        return -1 if batch is None else batch.index_of(row)

    @property
    def _skipping(self) -> bool:
        return getattr(self, "_prompt_history", None) is not None or getattr(self, "_pass_posterior", None) is not None

    @property
    def _batch_by_index(self) -> bool:
        """Whether dataloader rows are named by dataset index (a stream's prompt key), so that any process can
        generate any of them: for the skipping rule's picks, and for groups straddling processes."""
        return self._skipping or (
            bool(getattr(self.args, "dynamic_sampling", False)) and self._groups_split_over_processes
        )

    @property
    def _skip_history(self):
        """The active predictor's per-row arrays: the pass-rate posterior or the streak history."""
        return self._pass_posterior if self._pass_posterior is not None else self._prompt_history

    def _reset_step_skipping(self) -> None:
        # Per step, in generation order: each group's dataset index and whether it could have been skipped.
        self._step_indices: list[int] = []
        self._step_candidates: list[bool] = []
        self._step_skipped = 0

    def _get_dataloader(self, dataset, description, batch_size, sampler_fn=None, is_training=False, **kwargs):
        recording = is_training and self._batch_by_index and not self._streaming and sampler_fn is not None
        if recording:
            if self.args.dataloader_num_workers > 0 and not self.args.dataloader_in_order:
                raise ValueError(
                    "dataloader_in_order=False lets loader workers deliver batches out of sampler order, but "
                    f"{self._index_reason} pairs each batch with the dataset indices the sampler drew, in order; set "
                    "dataloader_in_order=True or dataloader_num_workers=0."
                )
            train_sampler = sampler_fn

            def sampler_fn(dataset):
                self._recording_sampler = RecordingSampler(train_sampler(dataset))
                return self._recording_sampler

        dataloader = super()._get_dataloader(dataset, description, batch_size, sampler_fn, is_training, **kwargs)
        if recording and isinstance(dataloader, DataLoaderDispatcher):
            raise ValueError(
                f"{self._index_reason} needs each process to draw its own training batches (accelerate's default); "
                "with dispatch_batches=True only the main process draws them. Leave "
                "accelerator_config.dispatch_batches unset."
            )
        return dataloader

    @property
    def _index_reason(self) -> str:
        return "skip_degenerate_prompts" if self._skipping else "dynamic sampling with groups straddling processes"

    def get_resumed_dataloader(self, dataloader, num_batches: int):
        # The skipped batches are drawn from the sampler but never delivered; their indices are dropped with them.
        sampler = getattr(self, "_recording_sampler", None)
        if sampler is not None:
            sampler.skip_batches(num_batches)
        return super().get_resumed_dataloader(dataloader, num_batches)

    def _prepare_inputs(self, generation_batch):
        sampler = getattr(self, "_recording_sampler", None)
        if sampler is not None and self.model.training:
            accelerator = self.accelerator
            indices = sampler.take_batch(
                len(generation_batch), accelerator.process_index, accelerator.num_processes,
                delivered=lambda indices: self._rows_match(generation_batch[0], indices[0]),
            )  # fmt: skip
            self._batch_row_indices = BatchRowIndices(generation_batch, indices)
        return super()._prepare_inputs(generation_batch)

    def _rows_match(self, row: dict, index: int) -> bool:
        """Whether dataloader `row` is row `index` of train_dataset; one row read per batch checks the pairing."""
        return "prompt" not in row or self.train_dataset[index]["prompt"] == row["prompt"]

    # Hooks called by DynamicSamplingMixin.

    def _skip_predicted_degenerate(self, first: list[int]) -> list[int]:
        """The dataset indices of the dataloader batch's groups (every process's, in order) with those predicted
        degenerate replaced by refill prompts that passed the rule."""
        if not self._skipping:
            return first
        self._reset_step_skipping()
        return self._pick(first, len(first)).prompts

    def _draw_prompt_indices(self, num_groups: int) -> list[int]:
        if not self._skipping:
            return self._refill_sampler.draw(num_groups)
        return self._pick([], num_groups).prompts

    def _forget_last_picks(self, count: int) -> None:
        """Takes back the last `count` picked prompts, which will not be generated (a stream ran dry mid-round)."""
        if self._skipping and count:
            del self._step_indices[-count:]
            del self._step_candidates[-count:]

    def _pick(self, first: list[int], needed: int):
        args = self.args
        rng = np.random.default_rng([args.seed, _SKIP_STREAM, self._skip_draws])
        self._skip_draws += 1
        floor = args.skip_min_explore_probability
        if self._pass_posterior is not None:
            step, posterior = self.state.global_step, self._pass_posterior

            def generate_probability(indices):
                return thompson_generate_probabilities(posterior, indices, step, self.num_generations, floor, rng)

        else:

            def generate_probability(indices):
                return explore_probabilities(
                    self._prompt_history, indices, self._explore_p["easy"], self._explore_p["hard"], floor
                )

        picked = pick_prompts(first, self._refill_sampler.draw, needed, generate_probability, rng)
        if picked.forced and not self._skip_budget_warned:
            self._skip_budget_warned = True
            logger.warning(
                f"skip_degenerate_prompts: {len(picked.forced)} of {needed} prompts were generated although the "
                f"history predicts them degenerate: too few others passed the skip rule. Most of the dataset looks "
                "all correct or all wrong to the policy; training goes on, but consider easier or harder prompts. "
                "This warning is shown once."
            )
        self._step_indices.extend(picked.prompts)
        self._step_candidates.extend(picked.candidates)
        self._step_skipped += len(picked.skipped)
        return picked

    def _outcome_summaries(self, scores: torch.Tensor, informative: torch.Tensor) -> torch.Tensor:
        """Per group of `scores` `(groups, G)`: its outcome code, completions right and completions scored, what the
        history records (`group_outcomes`, `group_successes`)."""
        right, scored = group_successes(scores, informative)
        outcomes = group_outcomes(scores, informative)
        return torch.stack([torch.from_numpy(column).long() for column in (outcomes, right, scored)], dim=1)

    def _record_prompt_outcomes(self, summaries: torch.Tensor) -> None:
        """Updates the history from the summaries of every group generated this step (`_outcome_summaries`, in
        generation order), adapts p and logs the skipping metrics."""
        if not self._skipping:
            return
        outcomes = summaries[:, 0].numpy().astype(np.int8)
        right, scored = (summaries[:, column].numpy().astype(np.float64) for column in (1, 2))
        informative = outcomes == INFORMATIVE
        if len(self._step_indices) != len(informative):
            raise RuntimeError(
                f"skip_degenerate_prompts: {len(informative)} groups were generated but {len(self._step_indices)} "
                "prompts were picked; the history cannot be matched to the groups."
            )
        args = self.args
        if self._pass_posterior is not None:
            if self._streaming:  # the stream's length becomes known as it is read
                self._set_posterior_memory()
            self._pass_posterior.record(self._step_indices, right, scored, self.state.global_step)
        else:
            self._prompt_history.record(self._step_indices, outcomes)
            seen = len(outcomes)
            target = args.skip_target_degenerate_share / 2
            for name, code in (("easy", 1), ("hard", 2)):
                share = float((outcomes == code).sum()) / seen
                self._explore_p[name] = adapt_explore_probability(
                    self._explore_p[name], share, target, args.skip_probability_step, args.skip_min_explore_probability
                )
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/skipped_prompts"].append(float(self._step_skipped))
        explored = np.asarray(self._step_candidates, dtype=bool)
        if explored.any():
            informative_frac = float(informative[explored].mean())
            metrics["dynamic_sampling/skip_candidates_informative_frac"].append(informative_frac)
        if self._prompt_history is not None:
            metrics["dynamic_sampling/explore_probability_easy"].append(self._explore_p["easy"])
            metrics["dynamic_sampling/explore_probability_hard"].append(self._explore_p["hard"])
        self._reset_step_skipping()

    # Checkpointing: the arrays go to a binary file, the rest into the JSON state.

    def _skipping_state(self) -> dict | None:
        if not self._skipping:
            return None
        return {
            "predictor": self.args.skip_predictor,
            "explore_p": dict(self._explore_p),
            "draws": self._skip_draws,
            "history_file": HISTORY_FILE,
        }

    def _save_prompt_history(self, checkpoint_dir: str) -> None:
        if self._skipping:
            np.savez_compressed(os.path.join(checkpoint_dir, HISTORY_FILE), **self._skip_history.arrays())

    def _load_skipping_state(self, state: dict | None, checkpoint_dir: str) -> None:
        if not self._skipping:
            return
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
            self._skip_history.load_arrays(arrays)
        self._explore_p = dict(state["explore_p"])
        self._skip_draws = int(state["draws"])
