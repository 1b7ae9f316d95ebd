"""Phase 1 of dynamic sampling: generation rounds in which each process generates, scores and keeps its own rows.

Each call goes through TRL's own `_generate` and `_calculate_rewards` (so vLLM server/colocate modes, weight sync
and every reward function run as in `GRPOTrainer`, each reward function once per completion), with the reward
gather that ends `_calculate_rewards` skipped (`rewards_kept_local`): a process scores only its own rows. Every
segment of a round is split over the processes in contiguous shares of whole groups (`layout.call_order`; the
per-process batch is a multiple of the group size, refills a multiple of the number of processes in groups), so a
process decides its own groups' informative flags. One small all-gather per round then gives every process every
share's informative count (`shares`), and, with prompt skipping, a few integers per group for the prompt history.
Completions, log-probs, rewards, extra fields and prompt rows stay on the process that generated them
(`GeneratedPool`).

Rows to generate are named by their source: `None` for a row of this process's own dataloader batch, or a
dataset index (a prompt key for a streaming dataset). Every process knows every source (refills are drawn by a
sampler identical on all processes), so no prompt row crosses processes; a stream's refill rows are the exception,
read by the main process and broadcast (stream.py).
"""

from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object

from .layout import call_order
from .selection import informative_group_mask
from .shares import GroupRef, Share, local_position, segment_shares
from .trl_hooks import extra_logs_set_aside, generate_like_trl, metric_gathers_skipped, rewards_kept_local


@dataclass
class GeneratedRow:
    """One generated completion with everything needed to replay it into TRL's scoring pass, its rewards included
    (one per reward function, as TRL's `_calculate_rewards` returns them). A plain picklable record: rows that
    change process are pickled whole, so rewards and extra per-row fields travel with them."""

    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    logprobs: list[float] | None
    extra: dict = field(default_factory=dict)
    extra_logs: dict = field(default_factory=dict)
    # Log-probs under the policy that generated the row, recorded only for a row carried to the next batch.
    generating_logps: torch.Tensor | None = None
    # With tools: the completion before TRL's tool loop, the loop's result and this row's tool-call counts
    # (trl_hooks.py).
    tool_rollout: dict | None = None
    # With environment_factory: the prompt TRL generated from, the environment's observation appended.
    generation_prompt: list | str | None = None
    # Plain floats, not a tensor: a pickled tensor costs some 400 bytes, a list of floats a few per value.
    rewards: list[float] | None = None


@dataclass
class OwnShare:
    """This process's groups of one share, their sampling scores `(groups, G)` and informative flags."""

    groups: list[list[GeneratedRow]]
    scores: torch.Tensor
    informative: list[bool]


@dataclass
class GeneratedPool:
    """A step's generated groups: every share (known to every process once its round is counted), this process's
    own shares by share number and, with prompt skipping, every group's outcome summary in generation order."""

    shares: list[Share] = field(default_factory=list)
    own: dict[int, OwnShare] = field(default_factory=dict)
    outcomes: list[torch.Tensor] = field(default_factory=list)

    @property
    def groups(self) -> int:
        return sum(share.groups for share in self.shares)

    @property
    def informative_groups(self) -> int:
        return sum(share.informative for share in self.shares)

    def holder(self, ref: GroupRef) -> int:
        return self.shares[ref.share].process

    def group(self, ref: GroupRef) -> list[GeneratedRow]:
        """The rows of one of this process's groups."""
        own = self.own[ref.share]
        return own.groups[local_position(own.informative, ref)]

    def local_rows(self) -> list[GeneratedRow]:
        return [row for own in self.own.values() for group in own.groups for row in group]


class GenerationRoundsMixin:
    """Generation calls of `DynamicSamplingMixin`'s phase 1; see the module docstring."""

    def _first_segment(self, inputs: list[dict]) -> list[int | None]:
        """Sources of the dataloader's batch over all processes. Usually every process generates its own rows; with
        skipping, or groups straddling processes, the batch's dataset indices are gathered (one integer per row), so
        that any process can generate any group, and the skipping rule replaces prompts predicted degenerate."""
        num_rows = len(inputs) * self.accelerator.num_processes
        if self._streaming:
            self._begin_stream_step(inputs)
        if not self._batch_by_index:
            return [None] * num_rows
        local_indices = torch.tensor(
            [self._row_key(row) for row in inputs], dtype=torch.long, device=self.accelerator.device
        )
        indices = self.accelerator.gather(local_indices).tolist()
        if min(indices) < 0:
            raise RuntimeError(
                "dynamic_sampling: a training batch row carries no dataset index; the training dataloader "
                "must be built by the trainer's own get_train_dataloader."
            )
        first = indices[:: self.num_generations]
        return [index for index in self._skip_predicted_degenerate(first) for _ in range(self.num_generations)]

    def _begin_stream_step(self, inputs: list[dict]) -> None:
        """Tells the stream refill which prompts the batch holds, so none is drawn again. With skipping, or groups
        straddling processes, a dataloader prompt may be generated by another process, which has no index to read it back by: the rows
        are gathered (prompt rows, not generated ones)."""
        if self._batch_by_index:
            rows = gather_object(list(inputs))
            self._refill_sampler.begin_step([self._row_key(row) for row in rows], rows)
            return
        local_keys = torch.tensor([self._row_key(row) for row in inputs], device=self.accelerator.device)
        self._refill_sampler.begin_step(self.accelerator.gather(local_keys).tolist())

    @property
    def _groups_split_over_processes(self) -> bool:
        """Whether the dataloader's groups straddle processes: a generation batch per process that is not a multiple
        of `num_generations`, on several processes."""
        args = self.args
        rows_per_process = args.per_device_train_batch_size * args.steps_per_generation
        return self.accelerator.num_processes > 1 and rows_per_process % self.num_generations != 0

    def _refill_sources(self, num_groups: int, already: int = 0) -> list[int]:
        """Sources of `num_groups` refill groups, to follow `already` groups in the same segment."""
        if num_groups == 0:
            return []
        indices = self._draw_prompt_indices(num_groups)
        if self._streaming:
            # A stream may run dry: keep as many groups as give every process whole groups.
            num_processes = self.accelerator.num_processes
            whole = (already + len(indices)) // num_processes * num_processes - already
            if whole < 0:
                raise RuntimeError(
                    f"dynamic_sampling: the streaming train_dataset ran dry before the {already} groups of this batch, "
                    f"which straddle the {num_processes} processes, could be completed into whole groups per process."
                )
            self._forget_last_picks(len(indices) - whole)
            indices = indices[:whole]
        return [index for index in indices for _ in range(self.num_generations)]

    def _round_calls(self, segments: list[list], batch_rows: int) -> list[list[list]]:
        """A round's generation calls: one, holding the whole round, so that each process hands TRL's `_generate` all
        its rows of the round at once (transformers' `generate` then gets them in as few calls as memory allows,
        `generate_calls`; vLLM batches internally). The rows are laid out in segments of one generation batch
        (`batch_rows`, rounded up to whole groups for every process), each split over the processes: the selection
        takes informative groups segment after segment, so short segments alternate the processes that hold the
        selected groups, and the exchange moves few rows."""
        rows = [source for segment in segments for source in segment]
        whole_groups = self.accelerator.num_processes * self.num_generations
        segment_rows = -(-batch_rows // whole_groups) * whole_groups
        return [[rows[start : start + segment_rows] for start in range(0, len(rows), segment_rows)]]

    def _materialize(self, source, flat_index: int, inputs: list[dict], own_by_index: dict) -> dict:
        if source is None:
            return dict(inputs[flat_index - self.accelerator.process_index * len(inputs)])
        own = own_by_index.get(source)
        if own:
            return dict(own.pop())
        return self._refill_row(source)

    def _generate_call(self, segments: list[list], inputs: list[dict], own_by_index: dict) -> list[list[GeneratedRow]]:
        """Generates and scores this process's share of each of `segments`; returns its rows, one list per segment."""
        num_processes, process = self.accelerator.num_processes, self.accelerator.process_index
        order = call_order([len(segment) for segment in segments], num_processes)
        flat = [source for segment in segments for source in segment]
        share = len(flat) // num_processes
        mine = order[process * share : (process + 1) * share]
        local_rows = [self._materialize(flat[i], i, inputs, own_by_index) for i in mine]
        # TRL prepares the prompts (environment resets and observations, tools, images) and generates.
        trl_scoring = super(GenerationRoundsMixin, self)._generate_and_score_completions
        # The round's first turn is the one call of `_generate_single_turn` every process makes for it: the memory
        # plan's gather goes there (generate_calls.py).
        with self._planned_round():
            prompts, generated, tool_rollouts = generate_like_trl(
                self, trl_scoring, local_rows, around_generate=lambda: metric_gathers_skipped(self)
            )
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _, _ = generated
        for key, values in extra_fields.items():
            for i, row in enumerate(local_rows):
                row[key] = values[i] if isinstance(values, list) else values

        with extra_logs_set_aside(self) as round_logs, rewards_kept_local():
            rewards = self._calculate_rewards(local_rows, prompts, completions, completion_ids).cpu()
        if rewards.shape[0] != len(local_rows):
            raise RuntimeError(
                f"dynamic_sampling: TRL's _calculate_rewards returned {rewards.shape[0]} rows for this process's "
                f"{len(local_rows)}; this TRL version is not supported with dynamic sampling. Set dynamic_sampling=False."
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
                generation_prompt=prompts[i] if self.environment_factories is not None else None,
                rewards=rewards[i].tolist(),
            )
            for i in range(len(local_rows))
        ]
        # `mine` runs through the segments in order, this process's share of each.
        bounds = [0]
        for segment in segments:
            bounds.append(bounds[-1] + len(segment) // num_processes)
        return [rows[low:high] for low, high in zip(bounds, bounds[1:], strict=False)]

    def _settle_round(self, round_shares: list[list[GeneratedRow]], pool: GeneratedPool) -> None:
        """Scores this process's groups of a round and adds every process's shares to `pool`. The round's one
        collective gathers each share's informative count, and with prompt skipping each group's outcome summary
        (`_outcome_summaries`: three small integers per group, not per completion)."""
        group_size, num_processes = self.num_generations, self.accelerator.num_processes
        counts, summaries, owns = [], [], []
        for rows in round_shares:
            scores = self._sampling_scores(torch.tensor([row.rewards for row in rows])).view(-1, group_size)
            informative = informative_group_mask(scores, self.args.dynamic_sampling_tolerance)
            groups = [rows[start : start + group_size] for start in range(0, len(rows), group_size)]
            owns.append(OwnShare(groups=groups, scores=scores, informative=informative.tolist()))
            counts.append(int(informative.sum()))
            if self._skipping:
                summaries.append(self._outcome_summaries(scores, informative))
        local = torch.tensor(counts, dtype=torch.int32)
        if summaries:
            local = torch.cat([local, torch.cat(summaries).flatten().to(torch.int32)])
        gathered = self.accelerator.gather(local.to(self.accelerator.device)).cpu().view(num_processes, -1)
        offset = len(owns)
        for number, own in enumerate(owns):
            pool.own[len(pool.shares) + num_processes * number + self.accelerator.process_index] = own
        for number, own in enumerate(owns):
            groups = len(own.groups)
            pool.shares.extend(segment_shares(groups, gathered[:, number].tolist()))
            if summaries:
                block = gathered[:, offset : offset + groups * 3].reshape(num_processes * groups, 3)
                pool.outcomes.append(block)
                offset += groups * 3

    def _sampling_scores(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self._sampling_metric_index is not None:
            return rewards_per_func[:, self._sampling_metric_index]
        weights = self.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return total
