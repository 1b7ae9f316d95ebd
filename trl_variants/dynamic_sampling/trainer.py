"""Trainer glue for dynamic sampling: `DynamicSamplingMixin._generate_and_score_completions` runs phase 1
(generation rounds, the shared keep/drop decision, carrying, the row exchange) and then replays the trained rows
into TRL's unchanged `_generate_and_score_completions` (phase 2).

docs/architecture.md follows one step through this module and the modules it calls, naming the function that owns
each part; docs/dynamic_sampling.md explains the mechanism and its guarantees.
"""

import copy
import json
import math
import os
from collections import Counter

import torch
from transformers.utils import logging

from ..rewards.overlong import is_soft_overlong_punishment

from .carry import first_round_extra_groups_after_carry, plan_carry, record_generating_logps
from .carry_checkpoint import load_carried_groups, save_carried_groups
from .carried_ratio import CarriedRatioWindow
from .generate_calls import GenerateCallsMixin
from .options import resolve_sampling_options
from .placement import CarriedGroups, TrainedBatch, place_batch
from .reward_metric import ALL_GROUPS_REWARD_METRIC, total_reward_sum
from .rounds import GeneratedPool, GenerationRoundsMixin
from .row_exchange import exchange_objects
from .selection import (
    NO_SIGNAL_STEPS,
    PassRateTracker,
    RefillSampler,
    degenerate_outcomes,
    groups_to_request,
    no_signal_warning,
    select_groups,
)
from .shares import group_ref, share_flags
from .skipping_trainer import PromptSkippingMixin
from .stream import StreamRefill
from .trl_hooks import (
    carried_rows_in_loss,
    engine_awake_across_rounds,
    replay_row,
    replaying_generation_and_rewards,
    replaying_tools_and_environments,
    scoring_with_generating_logps,
)

logger = logging.get_logger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
STREAM_RAN_DRY = (
    "The streaming train_dataset had no unread prompt left for this batch: a whole pass over it gave none that "
    "was not already in the batch."
)


class DynamicSamplingExhaustedError(RuntimeError):
    """Raised when `dynamic_sampling_on_exhausted="raise"` and the rounds ran out before the batch was full."""


class DynamicSamplingMixin(GenerationRoundsMixin, GenerateCallsMixin, PromptSkippingMixin):
    """Adds DAPO's dynamic sampling to a `GRPOTrainer` subclass by overriding `_generate_and_score_completions`
    in train mode; evaluation is never filtered. With `skip_degenerate_prompts`, prompts predicted degenerate are
    skipped before generation (`PromptSkippingMixin`)."""

    def _setup_dynamic_sampling(self) -> None:
        args = self.args
        self._sampling_metric_index = None
        self._refill_sampler = None
        self._pass_rate = PassRateTracker()
        # Surplus informative groups carried to the next generation batch, each row on the process that will train
        # it; checkpoints save them (carry_checkpoint.py).
        self._carried = CarriedGroups()
        self._carried_ratio = CarriedRatioWindow()
        self._options = resolve_sampling_options(
            args.dynamic_sampling, args.skip_degenerate_prompts, args.dynamic_sampling_carry_surplus,
            args.gradient_accumulation_steps, args.steps_per_generation, args.num_iterations, self._is_vlm,
        )  # fmt: skip
        if not args.dynamic_sampling:
            return
        if self._options.carry_off_reason is not None:
            logger.info(f"Dynamic sampling: surplus groups are not carried: {self._options.carry_off_reason}.")
        self._sampling_metric_index = self._resolve_sampling_metric(args.dynamic_sampling_metric)
        dataset = self.train_dataset
        if dataset is None:
            return
        if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
            self._refill_sampler = RefillSampler(dataset_size=len(dataset), seed=args.seed + 1)
        else:  # a stream: refill prompts are its next unread rows (stream.py)
            self._refill_sampler = StreamRefill(
                dataset, args.seed + 1, self.shuffle_dataset, self.accelerator.is_main_process
            )
        self._setup_prompt_skipping()

    def _resolve_sampling_metric(self, metric: str) -> int | None:
        """Index of the reward column that decides degeneracy, or `None` for the weighted total."""
        # A reward function's own name wins over the keywords, so a function called "total" can be chosen.
        if metric in self.reward_func_names:
            return self.reward_func_names.index(metric)
        if metric == "total":
            return None
        if metric == "accuracy":
            for index, reward_func in enumerate(self.reward_funcs):
                if not is_soft_overlong_punishment(reward_func):
                    return index
            raise ValueError(
                'dynamic_sampling_metric="accuracy" needs a reward function besides the soft overlong punishment; '
                f"the reward functions are {self.reward_func_names}."
            )
        raise ValueError(
            f"dynamic_sampling_metric={metric!r} is not allowed; expected \"accuracy\", \"total\" or one of the "
            f"reward function names {self.reward_func_names}."
        )

    def _generate_and_score_completions(self, inputs):
        if not (self.args.dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        with engine_awake_across_rounds(self):
            batch = self._sample_informative_batch(inputs)
        with (
            replaying_generation_and_rewards(self, batch.local),
            replaying_tools_and_environments(self, batch.local),
            scoring_with_generating_logps(self, batch.local, batch.carried_rows) as complete,
        ):
            return complete(super()._generate_and_score_completions([replay_row(row) for row in batch.local]))

    def _compute_loss(self, model, inputs):
        with carried_rows_in_loss(self, inputs, self._carried_ratio.add):
            loss = super()._compute_loss(model, inputs)
        # One gather per optimizer step, at its last micro-batch, and only in steps that trained carried rows.
        if self.accelerator.sync_gradients:
            metrics = self._carried_ratio.close(self.accelerator)
            for name, value in (metrics or {}).items():
                self._metrics["train"][name].append(value)
        return loss

    # Phase 1: generation rounds, the shared decision, the exchange of the rows that move.

    def _sample_informative_batch(self, inputs: list[dict]) -> TrainedBatch:
        args, group_size = self.args, self.num_generations
        num_processes = self.accelerator.num_processes
        first_segment = self._first_segment(inputs)
        batch_rows = len(first_segment)
        batch_groups = batch_rows // group_size
        # Carried groups are always trained now, so none is carried twice.
        carried, self._carried = self._carried, CarriedGroups()
        needed = batch_groups - len(carried)
        # Equal to `first_round_extra_groups` when nothing is carried. Refills come in multiples of the number of
        # processes, so that every process generates whole groups.
        extra_groups = first_round_extra_groups_after_carry(
            batch_groups, len(carried), self._pass_rate.estimate, num_processes
        )
        if self._groups_split_over_processes:
            # The dataloader's groups straddle processes; with the first refills they form one segment of whole
            # groups per process.
            extra_groups += -(batch_groups + extra_groups) % num_processes
            segments = [first_segment + self._refill_sources(extra_groups, already=batch_groups)]
        else:
            segments = [first_segment, self._refill_sources(extra_groups)]
        own_by_index = self._own_rows_by_index(inputs)

        # Phase 1's own `_generate` calls would log TRL's completion metrics and token counts for every round;
        # they are restored so that TRL's metrics describe the trained batch, which phase 2 logs.
        saved_metrics = copy.deepcopy(self._metrics["train"])
        saved_tokens_seen = self.state.num_input_tokens_seen

        pool = GeneratedPool()
        rounds = 0
        while True:
            rounds += 1
            round_shares = [
                rows
                for call in self._round_calls(segments, batch_rows)
                for rows in self._generate_call(call, inputs, own_by_index)
            ]
            self._settle_round(round_shares, pool)
            found, seen = pool.informative_groups, pool.groups
            if found >= needed or rounds >= args.dynamic_sampling_max_rounds:
                break
            request = groups_to_request(needed - found, found / seen, batch_groups, num_processes)
            segments = [self._refill_sources(request)]
            if not segments[0]:  # a stream with no unread prompt left
                break

        self._metrics["train"] = saved_metrics
        self.state.num_input_tokens_seen = saved_tokens_seen

        flags = share_flags(pool.shares)
        selection = select_groups(flags, needed, fill=args.dynamic_sampling_on_exhausted == "fill")
        ran_dry = self._streaming and self._refill_sampler.ran_dry
        if len(selection.indices) < needed:
            raise DynamicSamplingExhaustedError(
                f"Dynamic sampling found {found} informative groups of the {needed} needed after {rounds} "
                f"rounds (max {args.dynamic_sampling_max_rounds}): pass rate {found / seen:.3f} over {seen} generated "
                "groups. Raise dynamic_sampling_max_rounds, use prompts of a difficulty where the policy is sometimes "
                'right and sometimes wrong, or set dynamic_sampling_on_exhausted="fill" to train on.'
                + (f" {STREAM_RAN_DRY}" if ran_dry else "")
            )
        if selection.filled:
            logger.warning(
                f"Dynamic sampling: only {found} of {needed} groups were informative after {rounds} rounds; "
                f"filled the batch with {len(selection.filled)} degenerate groups (no signal on the sampling metric)."
                + (f" {STREAM_RAN_DRY}" if ran_dry else "")
            )
        capacity = batch_groups if self._options.carry_surplus else 0
        surplus = plan_carry(flags, selection.indices, capacity)
        batch, self._carried = place_batch(
            carried, pool, [group_ref(pool.shares, i) for i in selection.indices],
            [group_ref(pool.shares, i) for i in surplus.carried], group_size, len(inputs), num_processes,
            self.accelerator.process_index, self._exchange_rows,
        )  # fmt: skip
        # Recorded now, before this step's optimizer update: this is the policy that generated the rows.
        carried_per_process = Counter(holder for group in self._carried.holders for holder in group)
        most_rows = max(carried_per_process.values(), default=0)
        record_generating_logps(self, list(self._carried.rows.values()), most_rows, filler=batch.local[0])
        self._log_sampling_step(pool, selection, surplus, rounds, len(carried))
        return batch

    def _own_rows_by_index(self, inputs: list[dict]) -> dict[int, list[dict]]:
        """This process's dataloader rows by dataset index (a stream's prompt key), for the skipping rule's picks
        or for groups straddling processes (empty otherwise)."""
        own: dict[int, list[dict]] = {}
        if self._batch_by_index:
            for row in inputs:
                own.setdefault(self._row_key(row), []).append(row)
        return own

    @property
    def _streaming(self) -> bool:
        return isinstance(self._refill_sampler, StreamRefill)

    def _refill_row(self, index: int) -> dict:
        """The row of a drawn refill prompt: a dataset index, or a stream's prompt key."""
        return self._refill_sampler.row(index) if self._streaming else dict(self.train_dataset[index])

    def _exchange_rows(self, outgoing: dict[int, list], senders: list[int]) -> dict[int, list]:
        return exchange_objects(outgoing, senders, self.accelerator.device)

    def _log_sampling_step(self, pool: GeneratedPool, selection, surplus, rounds: int, carried_groups: int) -> None:
        args = self.args
        found, seen = pool.informative_groups, pool.groups
        self._pass_rate.update(found, seen)
        if self._pass_rate.steps_without_signal == NO_SIGNAL_STEPS:
            rewards = [row.rewards for row in pool.local_rows()]
            values = {name: [None if math.isnan(row[i]) else row[i] for row in rewards]
                      for i, name in enumerate(self.reward_func_names)}  # fmt: skip
            logger.warning(no_signal_warning(NO_SIGNAL_STEPS, values))
        if self._skipping:
            self._record_prompt_outcomes(torch.cat(pool.outcomes))
        # Sums over this process's own groups, reduced once: degenerate kinds, rewards, generated tokens.
        own = list(pool.own.values())
        all_correct, all_wrong = degenerate_outcomes(
            torch.cat([share.scores for share in own]), torch.tensor([flag for share in own for flag in share.informative])
        )
        local_rows = pool.local_rows()
        reward_sum, completions = total_reward_sum(torch.tensor([row.rewards for row in local_rows]), self.reward_weights)
        tokens = sum(len(row.completion_ids) for row in local_rows)
        # Counts as int64 (exact at any scale) and the reward sum as float32: no float64 on the device, which MPS and
        # some XPUs do not have.
        device = self.accelerator.device
        counts = torch.tensor([all_correct, all_wrong, completions, tokens], dtype=torch.int64, device=device)
        reward = torch.tensor([reward_sum], dtype=torch.float32, device=device)
        counts, reward = self.accelerator.reduce([counts, reward], reduction="sum")
        all_correct, all_wrong, completions, tokens = counts.tolist()
        reward_sum = reward.item()
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/generated_groups"].append(float(seen))
        # Carried groups are informative groups of the trained batch too.
        metrics["dynamic_sampling/kept_groups"].append(float(len(selection.kept) + carried_groups))
        metrics["dynamic_sampling/pass_rate"].append(found / seen)
        metrics["dynamic_sampling/all_correct_frac"].append(all_correct / seen)
        metrics["dynamic_sampling/all_wrong_frac"].append(all_wrong / seen)
        metrics["dynamic_sampling/filled"].append(float(bool(selection.filled)))
        metrics["dynamic_sampling/dropped_informative_groups"].append(float(len(surplus.dropped)))
        if self._options.carry_surplus:
            metrics["dynamic_sampling/carried_groups"].append(float(carried_groups))
        # TRL's `num_tokens` counts the trained batch only; this is the generation work the step really cost.
        metrics["dynamic_sampling/generated_tokens"].append(tokens)
        # TRL's `reward` covers the trained (informative) groups only; this is what it would show without filtering.
        metrics[ALL_GROUPS_REWARD_METRIC].append(reward_sum / completions)

    # Checkpointing: the refill sampler continues after a resume instead of replaying the same prompts.

    def _dynamic_sampling_state(self) -> dict:
        return {
            "refill_sampler": self._refill_sampler.state_dict() if self._refill_sampler else None,
            "pass_rate_estimate": self._pass_rate.estimate,
            "skipping": self._skipping_state(),
        }

    def _save_dynamic_sampling_state(self, checkpoint_dir: str) -> None:
        # On every process: the smallest cap any process learned from an out-of-memory error (generate_calls.py).
        # Kept with dynamic sampling off too: the cap caps a plain generation batch's call alike.
        rows_per_call = self._learned_rows_per_call()
        if self.args.should_save and (self.args.dynamic_sampling or rows_per_call is not None):
            state = self._dynamic_sampling_state() if self.args.dynamic_sampling else {}
            with open(os.path.join(checkpoint_dir, STATE_FILE), "w") as state_file:
                json.dump({**state, "rows_per_call_after_oom": rows_per_call}, state_file)
        if self.args.dynamic_sampling and self.args.should_save:
            self._save_prompt_history(checkpoint_dir)
        if self._options.carry_surplus:
            save_carried_groups(self, checkpoint_dir)

    def _load_dynamic_sampling_state(self, checkpoint_dir: str) -> None:
        path = os.path.join(checkpoint_dir, STATE_FILE)
        if not os.path.exists(path):
            return
        with open(path) as state_file:
            state = json.load(state_file)
        self._rows_per_call_after_oom = state.get("rows_per_call_after_oom")
        if not self.args.dynamic_sampling or "refill_sampler" not in state:
            return
        if state["refill_sampler"] is not None and self._refill_sampler is not None:
            self._refill_sampler.load_state_dict(state["refill_sampler"])
        self._pass_rate.estimate = state["pass_rate_estimate"]
        self._load_skipping_state(state.get("skipping"), checkpoint_dir)
        if self._options.carry_surplus:
            self._carried = load_carried_groups(self, checkpoint_dir)
