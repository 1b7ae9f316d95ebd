"""`DynamicSampler`: DAPO's dynamic sampling as one object that owns all its state, called by the trainer's
`_generate_and_score_completions` (trainer.py) for phase 1 of a training step.

Phase 1, `sample_batch`: generation rounds until the step has enough informative groups, the keep/carry/drop
decision every process takes alike, and the row exchange that lays the trained batch out over the processes. The
trainer then replays the trained rows into TRL's unchanged `_generate_and_score_completions` (phase 2, trl_hooks.py).

A round (`generate_round`): each call goes through TRL's own `_generate` and `_calculate_rewards` (so vLLM
server/colocate modes, weight sync and every reward function run as in `GRPOTrainer`, each reward function once per
completion), with the reward gather that ends `_calculate_rewards` skipped (`trl_hooks.rewards_kept_local`): a
process scores only its own rows. Every segment of a round is split over the processes in contiguous shares of
whole groups (`placement.call_order`), so a process decides its own groups' informative flags. One small all-gather
per round gives every process every share's informative count (`placement.Share`) and, with prompt skipping, a few
integers per group for the prompt history. Completions, log-probs, rewards, extra fields and prompt rows stay on
the process that generated them (`GeneratedPool`) until the exchange moves the trained rows that must move.

Rows to generate are named by their source: `None` for a row of this process's own dataloader batch, or a dataset
index (a prompt key for a streaming dataset). Every process knows every source (refills are drawn by a sampler
identical on all processes), so no prompt row crosses processes; a stream's refill rows are the exception, read by
the main process and broadcast (prompt_sources.py).

The decision itself is pure (`selection.decide_round`); docs/architecture.md follows one step through it.
"""

import copy
import math
from collections import Counter

import torch
from accelerate.utils import gather_object
from transformers.utils import logging

from ..rewards.overlong import is_soft_overlong_punishment
from .carry import CarriedRatioWindow, record_generating_logps
from .generate_calls import GenerateCalls
from .placement import (
    CarriedGroups,
    GeneratedPool,
    GeneratedRow,
    OwnShare,
    TrainedBatch,
    call_order,
    exchange_objects,
    place_batch,
)
from .prompt_sources import STREAM_KEY_SPACE, DatasetIndices, RefillSampler, StreamRefill
from .selection import (
    ALL_GROUPS_REWARD_METRIC,
    NO_SIGNAL_STEPS,
    PassRateTracker,
    decide_round,
    degenerate_outcomes,
    first_round_extra_groups_after_carry,
    groups_to_request,
    informative_group_mask,
    no_signal_warning,
    resolve_sampling_options,
    segment_shares,
    total_reward_sum,
)
from .trl_hooks import extra_logs_set_aside, generate_like_trl, metric_gathers_skipped, rewards_kept_local

logger = logging.get_logger(__name__)

STREAM_RAN_DRY = (
    "The streaming train_dataset had no unread prompt left for this batch: a whole pass over it gave none that "
    "was not already in the batch."
)


class DynamicSamplingExhaustedError(RuntimeError):
    """Raised when `dynamic_sampling_on_exhausted="raise"` and the rounds ran out before the batch was full."""


class DynamicSampler:
    """All of dynamic sampling's state for one trainer, and phase 1 of its training steps (see the module
    docstring). The trainer holds one (`_dynamic_sampler`), made right after `GRPOTrainer.__init__`, and its
    overrides delegate to it; it reaches TRL only through the trainer's attributes and trl_hooks.py.

    State: `options` (which savings the run uses), `metric_index` (the reward column that decides degeneracy),
    `refill` (the refill source), `indices` (dataset indices of dataloader rows), `pass_rate`, `carried` (surplus
    groups carried to the next batch), `carried_ratio`, `calls` (generate-call sizes, learned ones included) and,
    with `skip_degenerate_prompts`, `skipper` (experimental/prompt_skipping). Checkpoints save all of it
    (checkpoint.py)."""

    def __init__(self, trainer):
        self.trainer = trainer
        args = trainer.args
        self.enabled = bool(args.dynamic_sampling)
        self.calls = GenerateCalls(trainer)
        self.pass_rate = PassRateTracker()
        self.carried = CarriedGroups()
        self.carried_ratio = CarriedRatioWindow()
        self.metric_index = None
        self.refill = None
        self.skipper = None
        self.options = resolve_sampling_options(
            args.dynamic_sampling, args.skip_degenerate_prompts, args.dynamic_sampling_carry_surplus,
            args.gradient_accumulation_steps, args.steps_per_generation, args.num_iterations, trainer._is_vlm,
        )  # fmt: skip
        self.indices = DatasetIndices(None, False, trainer.train_dataset)
        if not self.enabled:
            return
        if self.options.carry_off_reason is not None:
            logger.info(f"Dynamic sampling: surplus groups are not carried: {self.options.carry_off_reason}.")
        self.metric_index = sampling_metric_index(
            args.dynamic_sampling_metric, trainer.reward_func_names, trainer.reward_funcs
        )
        dataset = trainer.train_dataset
        if dataset is None:
            return
        if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
            self.refill = RefillSampler(dataset_size=len(dataset), seed=args.seed + 1)
        else:  # a stream: refill prompts are its next unread rows
            is_main = trainer.accelerator.is_main_process
            self.refill = StreamRefill(dataset, args.seed + 1, trainer.shuffle_dataset, is_main)
        if self.options.skip_degenerate_prompts:
            from ..experimental.prompt_skipping import PromptSkipper

            key_space = STREAM_KEY_SPACE if self.streaming else len(dataset)
            self.skipper = PromptSkipper(args, trainer.num_generations, self.refill, key_space, self.streaming)
        reason = (
            "skip_degenerate_prompts"
            if self.skipper is not None
            else "dynamic sampling with groups straddling processes" if self.groups_split_over_processes else None
        )
        self.indices = DatasetIndices(reason, self.streaming, dataset)

    @property
    def streaming(self) -> bool:
        return isinstance(self.refill, StreamRefill)

    @property
    def batch_by_index(self) -> bool:
        """Whether dataloader rows are named by dataset index (a stream's prompt key), so that any process can
        generate any of them: for the skipping rule's picks, and for groups straddling processes."""
        return self.indices.reason is not None

    @property
    def groups_split_over_processes(self) -> bool:
        """Whether the dataloader's groups straddle processes: a generation batch per process that is not a multiple
        of `num_generations`, on several processes."""
        trainer = self.trainer
        rows_per_process = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
        return trainer.accelerator.num_processes > 1 and rows_per_process % trainer.num_generations != 0

    # Phase 1: generation rounds, the shared decision, the exchange of the rows that move.

    def sample_batch(self, inputs: list[dict], trl_generate_and_score) -> TrainedBatch:
        """This process's rows of the step's trained batch. `trl_generate_and_score` is `GRPOTrainer`'s own
        `_generate_and_score_completions`, which each round runs up to the end of `_generate`."""
        trainer = self.trainer
        args, group_size = trainer.args, trainer.num_generations
        num_processes = trainer.accelerator.num_processes
        first_segment = self.first_segment(inputs)
        batch_rows = len(first_segment)
        batch_groups = batch_rows // group_size
        # Carried groups are always trained now, so none is carried twice.
        carried, self.carried = self.carried, CarriedGroups()
        needed = batch_groups - len(carried)
        # Equal to `first_round_extra_groups` when nothing is carried. Refills come in multiples of the number of
        # processes, so that every process generates whole groups.
        extra_groups = first_round_extra_groups_after_carry(
            batch_groups, len(carried), self.pass_rate.estimate, num_processes
        )
        if self.groups_split_over_processes:
            # The dataloader's groups straddle processes; with the first refills they form one segment of whole
            # groups per process.
            extra_groups += -(batch_groups + extra_groups) % num_processes
            segments = [first_segment + self.refill_sources(extra_groups, already=batch_groups)]
        else:
            segments = [first_segment, self.refill_sources(extra_groups)]
        own_by_index = self.own_rows_by_index(inputs)

        # Phase 1's own `_generate` calls would log TRL's completion metrics and token counts for every round;
        # they are restored so that TRL's metrics describe the trained batch, which phase 2 logs.
        saved_metrics = copy.deepcopy(trainer._metrics["train"])
        saved_tokens_seen = trainer.state.num_input_tokens_seen

        pool = GeneratedPool()
        rounds = 0
        while True:
            rounds += 1
            round_shares = [
                rows
                for call in self.round_calls(segments, batch_rows)
                for rows in self.generate_round(call, inputs, own_by_index, trl_generate_and_score)
            ]
            self.settle_round(round_shares, pool)
            found, seen = pool.informative_groups, pool.groups
            if found >= needed or rounds >= args.dynamic_sampling_max_rounds:
                break
            request = groups_to_request(needed - found, found / seen, batch_groups, num_processes)
            segments = [self.refill_sources(request)]
            if not segments[0]:  # a stream with no unread prompt left
                break

        trainer._metrics["train"] = saved_metrics
        trainer.state.num_input_tokens_seen = saved_tokens_seen

        decision = decide_round(
            [(share.groups, share.informative) for share in pool.shares], needed,
            fill=args.dynamic_sampling_on_exhausted == "fill",
            carry_capacity=batch_groups if self.options.carry_surplus else 0,
        )  # fmt: skip
        ran_dry = self.streaming and self.refill.ran_dry
        if decision.short:
            raise DynamicSamplingExhaustedError(
                f"Dynamic sampling found {found} informative groups of the {needed} needed after {rounds} "
                f"rounds (max {args.dynamic_sampling_max_rounds}): pass rate {found / seen:.3f} over {seen} generated "
                "groups. Raise dynamic_sampling_max_rounds, use prompts of a difficulty where the policy is sometimes "
                'right and sometimes wrong, or set dynamic_sampling_on_exhausted="fill" to train on.'
                + (f" {STREAM_RAN_DRY}" if ran_dry else "")
            )
        if decision.filled:
            logger.warning(
                f"Dynamic sampling: only {found} of {needed} groups were informative after {rounds} rounds; "
                f"filled the batch with {len(decision.filled)} degenerate groups (no signal on the sampling metric)."
                + (f" {STREAM_RAN_DRY}" if ran_dry else "")
            )
        batch, self.carried = place_batch(
            carried, pool, decision.trained, decision.carried, group_size, len(inputs), num_processes,
            trainer.accelerator.process_index, self.exchange_rows,
        )  # fmt: skip
        # Recorded now, before this step's optimizer update: this is the policy that generated the rows.
        carried_per_process = Counter(holder for group in self.carried.holders for holder in group)
        most_rows = max(carried_per_process.values(), default=0)
        record_generating_logps(trainer, list(self.carried.rows.values()), most_rows, filler=batch.local[0])
        self.log_step(pool, decision, rounds, len(carried))
        return batch

    def exchange_rows(self, outgoing: dict[int, list], senders: list[int]) -> dict[int, list]:
        """The row exchange's messages (placement.exchange_objects)."""
        return exchange_objects(outgoing, senders, self.trainer.accelerator.device)

    def first_segment(self, inputs: list[dict]) -> list[int | None]:
        """Sources of the dataloader's batch over all processes. Usually every process generates its own rows; with
        skipping, or groups straddling processes, the batch's dataset indices are gathered (one integer per row), so
        that any process can generate any group, and the skipping rule replaces prompts predicted degenerate."""
        trainer = self.trainer
        accelerator, group_size = trainer.accelerator, trainer.num_generations
        num_rows = len(inputs) * accelerator.num_processes
        if self.streaming:
            self.begin_stream_step(inputs)
        if not self.batch_by_index:
            return [None] * num_rows
        local_keys = [self.indices.key(row) for row in inputs]
        keys = accelerator.gather(torch.tensor(local_keys, dtype=torch.long, device=accelerator.device)).tolist()
        if min(keys) < 0:
            raise RuntimeError(
                "dynamic_sampling: a training batch row carries no dataset index; the training dataloader "
                "must be built by the trainer's own get_train_dataloader."
            )
        first = keys[::group_size]
        if self.skipper is not None:
            first = self.skipper.replace(first, trainer.state.global_step)
        return [key for key in first for _ in range(group_size)]

    def begin_stream_step(self, inputs: list[dict]) -> None:
        """Tells the stream refill which prompts the batch holds, so none is drawn again. With skipping, or groups
        straddling processes, a dataloader prompt may be generated by another process, which has no index to read
        it back by: the rows are gathered (prompt rows, not generated ones)."""
        if self.batch_by_index:
            rows = gather_object(list(inputs))
            self.refill.begin_step([self.indices.key(row) for row in rows], rows)
            return
        accelerator = self.trainer.accelerator
        local_keys = torch.tensor([self.indices.key(row) for row in inputs], device=accelerator.device)
        self.refill.begin_step(accelerator.gather(local_keys).tolist())

    def draw_prompts(self, num_groups: int) -> list[int]:
        if self.skipper is None:
            return self.refill.draw(num_groups)
        return self.skipper.draw(num_groups, self.trainer.state.global_step)

    def refill_sources(self, num_groups: int, already: int = 0) -> list[int]:
        """Sources of `num_groups` refill groups, to follow `already` groups in the same segment."""
        if num_groups == 0:
            return []
        keys = self.draw_prompts(num_groups)
        if self.streaming:
            # A stream may run dry: keep as many groups as give every process whole groups.
            num_processes = self.trainer.accelerator.num_processes
            whole = (already + len(keys)) // num_processes * num_processes - already
            if whole < 0:
                raise RuntimeError(
                    f"dynamic_sampling: the streaming train_dataset ran dry before the {already} groups of this batch, "
                    f"which straddle the {num_processes} processes, could be completed into whole groups per process."
                )
            if self.skipper is not None:
                self.skipper.forget(len(keys) - whole)
            keys = keys[:whole]
        return [key for key in keys for _ in range(self.trainer.num_generations)]

    def own_rows_by_index(self, inputs: list[dict]) -> dict[int, list[dict]]:
        """This process's dataloader rows by dataset index (a stream's prompt key), for the skipping rule's picks
        or for groups straddling processes (empty otherwise)."""
        own: dict[int, list[dict]] = {}
        if self.batch_by_index:
            for row in inputs:
                own.setdefault(self.indices.key(row), []).append(row)
        return own

    def round_calls(self, segments: list[list], batch_rows: int) -> list[list[list]]:
        """A round's generation calls: one, holding the whole round, so that each process hands TRL's `_generate` all
        its rows of the round at once (transformers' `generate` then gets them in as few calls as memory allows,
        generate_calls.py; vLLM batches internally). The rows are laid out in segments of one generation batch
        (`batch_rows`, rounded up to whole groups for every process), each split over the processes: the selection
        takes informative groups segment after segment, so short segments alternate the processes that hold the
        selected groups, and the exchange moves few rows."""
        rows = [source for segment in segments for source in segment]
        whole_groups = self.trainer.accelerator.num_processes * self.trainer.num_generations
        segment_rows = -(-batch_rows // whole_groups) * whole_groups
        return [[rows[start : start + segment_rows] for start in range(0, len(rows), segment_rows)]]

    def prompt_row(self, source, flat_index: int, inputs: list[dict], own_by_index: dict) -> dict:
        """The dataset row of a source: this process's dataloader row, or a refill prompt's row."""
        if source is None:
            return dict(inputs[flat_index - self.trainer.accelerator.process_index * len(inputs)])
        own = own_by_index.get(source)
        if own:
            return dict(own.pop())
        return self.refill.row(source) if self.streaming else dict(self.trainer.train_dataset[source])

    def generate_round(
        self, segments: list[list], inputs: list[dict], own_by_index: dict, trl_generate_and_score
    ) -> list[list[GeneratedRow]]:
        """Generates and scores this process's share of each of `segments`; returns its rows, one list per segment."""
        trainer = self.trainer
        num_processes, process = trainer.accelerator.num_processes, trainer.accelerator.process_index
        order = call_order([len(segment) for segment in segments], num_processes)
        flat = [source for segment in segments for source in segment]
        share = len(flat) // num_processes
        mine = order[process * share : (process + 1) * share]
        local_rows = [self.prompt_row(flat[i], i, inputs, own_by_index) for i in mine]
        # TRL prepares the prompts (environment resets and observations, tools, images) and generates. The round's
        # first turn is the one call of `_generate_single_turn` every process makes for it: the memory plan's
        # gather goes there (generate_calls.py).
        with self.calls.planned_round():
            prompts, generated, tool_rollouts = generate_like_trl(
                trainer, trl_generate_and_score, local_rows, around_generate=lambda: metric_gathers_skipped(trainer)
            )
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _, _ = generated
        for key, values in extra_fields.items():
            for i, row in enumerate(local_rows):
                row[key] = values[i] if isinstance(values, list) else values

        with extra_logs_set_aside(trainer) as round_logs, rewards_kept_local():
            rewards = trainer._calculate_rewards(local_rows, prompts, completions, completion_ids).cpu()
        if rewards.shape[0] != len(local_rows):
            raise RuntimeError(
                f"dynamic_sampling: TRL's _calculate_rewards returned {rewards.shape[0]} rows for this process's "
                f"{len(local_rows)}; this TRL version is not supported with dynamic sampling. Set "
                "dynamic_sampling=False."
            )
        rows = [
            GeneratedRow(
                row=local_rows[i],
                prompt_ids=prompt_ids[i],
                completion_ids=completion_ids[i],
                tool_mask=tool_mask[i] if tool_mask is not None else None,
                logprobs=logprobs[i] if logprobs is not None else None,
                extra={k: v[i] if isinstance(v, list) else v for k, v in extra_fields.items()},
                extra_logs={k: v[i] for k, v in round_logs.items() if len(v) == len(local_rows)},
                tool_rollout=tool_rollouts[i],
                generation_prompt=prompts[i] if trainer.environment_factories is not None else None,
                rewards=rewards[i].tolist(),
            )
            for i in range(len(local_rows))
        ]
        # `mine` runs through the segments in order, this process's share of each.
        bounds = [0]
        for segment in segments:
            bounds.append(bounds[-1] + len(segment) // num_processes)
        return [rows[low:high] for low, high in zip(bounds, bounds[1:], strict=False)]

    def settle_round(self, round_shares: list[list[GeneratedRow]], pool: GeneratedPool) -> None:
        """Scores this process's groups of a round and adds every process's shares to `pool`. The round's one
        collective gathers each share's informative count, and with prompt skipping each group's outcome summary
        (three small integers per group, not per completion)."""
        trainer = self.trainer
        group_size, num_processes = trainer.num_generations, trainer.accelerator.num_processes
        counts, summaries, owns = [], [], []
        for rows in round_shares:
            scores = self.sampling_scores(torch.tensor([row.rewards for row in rows])).view(-1, group_size)
            informative = informative_group_mask(scores, trainer.args.dynamic_sampling_tolerance)
            groups = [rows[start : start + group_size] for start in range(0, len(rows), group_size)]
            owns.append(OwnShare(groups=groups, scores=scores, informative=informative.tolist()))
            counts.append(int(informative.sum()))
            if self.skipper is not None:
                summaries.append(self.skipper.summaries(scores, informative))
        local = torch.tensor(counts, dtype=torch.int32)
        if summaries:
            local = torch.cat([local, torch.cat(summaries).flatten().to(torch.int32)])
        gathered = trainer.accelerator.gather(local.to(trainer.accelerator.device)).cpu().view(num_processes, -1)
        offset = len(owns)
        for number, own in enumerate(owns):
            pool.own[len(pool.shares) + num_processes * number + trainer.accelerator.process_index] = own
        for number, own in enumerate(owns):
            groups = len(own.groups)
            pool.shares.extend(segment_shares(groups, gathered[:, number].tolist()))
            if summaries:
                block = gathered[:, offset : offset + groups * 3].reshape(num_processes * groups, 3)
                pool.outcomes.append(block)
                offset += groups * 3

    def sampling_scores(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self.metric_index is not None:
            return rewards_per_func[:, self.metric_index]
        weights = self.trainer.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return total

    def log_step(self, pool: GeneratedPool, decision, rounds: int, carried_groups: int) -> None:
        trainer = self.trainer
        found, seen = pool.informative_groups, pool.groups
        self.pass_rate.update(found, seen)
        if self.pass_rate.steps_without_signal == NO_SIGNAL_STEPS:
            rewards = [row.rewards for row in pool.local_rows()]
            values = {name: [None if math.isnan(row[i]) else row[i] for row in rewards]
                      for i, name in enumerate(trainer.reward_func_names)}  # fmt: skip
            logger.warning(no_signal_warning(NO_SIGNAL_STEPS, values))
        metrics = trainer._metrics["train"]
        if self.skipper is not None:
            self.skipper.record(torch.cat(pool.outcomes), trainer.state.global_step, metrics)
        # Sums over this process's own groups, reduced once: degenerate kinds, rewards, generated tokens.
        own = list(pool.own.values())
        all_correct, all_wrong = degenerate_outcomes(
            torch.cat([share.scores for share in own]),
            torch.tensor([flag for share in own for flag in share.informative]),
        )
        local_rows = pool.local_rows()
        reward_sum, completions = total_reward_sum(
            torch.tensor([row.rewards for row in local_rows]), trainer.reward_weights
        )
        tokens = sum(len(row.completion_ids) for row in local_rows)
        # Counts as int64 (exact at any scale) and the reward sum as float32: no float64 on the device, which MPS and
        # some XPUs do not have.
        device = trainer.accelerator.device
        counts = torch.tensor([all_correct, all_wrong, completions, tokens], dtype=torch.int64, device=device)
        reward = torch.tensor([reward_sum], dtype=torch.float32, device=device)
        counts, reward = trainer.accelerator.reduce([counts, reward], reduction="sum")
        all_correct, all_wrong, completions, tokens = counts.tolist()
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/generated_groups"].append(float(seen))
        # Carried groups are informative groups of the trained batch too.
        metrics["dynamic_sampling/kept_groups"].append(float(len(decision.kept) + carried_groups))
        metrics["dynamic_sampling/pass_rate"].append(found / seen)
        metrics["dynamic_sampling/all_correct_frac"].append(all_correct / seen)
        metrics["dynamic_sampling/all_wrong_frac"].append(all_wrong / seen)
        metrics["dynamic_sampling/filled"].append(float(bool(decision.filled)))
        metrics["dynamic_sampling/dropped_informative_groups"].append(float(len(decision.dropped)))
        if self.options.carry_surplus:
            metrics["dynamic_sampling/carried_groups"].append(float(carried_groups))
        # TRL's `num_tokens` counts the trained batch only; this is the generation work the step really cost.
        metrics["dynamic_sampling/generated_tokens"].append(tokens)
        # TRL's `reward` covers the trained (informative) groups only; this is what it would show without filtering.
        metrics[ALL_GROUPS_REWARD_METRIC].append(reward.item() / completions)


def sampling_metric_index(metric: str, reward_func_names: list[str], reward_funcs: list) -> int | None:
    """Index of the reward column that decides degeneracy, or `None` for the weighted total."""
    # A reward function's own name wins over the keywords, so a function called "total" can be chosen.
    if metric in reward_func_names:
        return reward_func_names.index(metric)
    if metric == "total":
        return None
    if metric == "accuracy":
        for index, reward_func in enumerate(reward_funcs):
            if not is_soft_overlong_punishment(reward_func):
                return index
        raise ValueError(
            'dynamic_sampling_metric="accuracy" needs a reward function besides the soft overlong punishment; '
            f"the reward functions are {reward_func_names}."
        )
    raise ValueError(
        f"dynamic_sampling_metric={metric!r} is not allowed; expected \"accuracy\", \"total\" or one of the "
        f"reward function names {reward_func_names}."
    )
