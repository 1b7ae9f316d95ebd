"""Phase 1 of dynamic sampling: generation calls in which each process generates and keeps its own rows.

Each call goes through TRL's own `_generate` and `_calculate_rewards` (so vLLM server/colocate modes, weight sync
and every reward function run as in `GRPOTrainer`, each reward function once per completion). TRL's reward gather
is the one exchange a call needs: it gives every process every row's scores, from which every process takes the
same keep/drop decision. Completions, log-probs, extra fields and prompt rows stay on the process that generated
them (`GeneratedPool`).

Rows to generate are named by their source: `None` for a row of this process's own dataloader batch, or a
dataset index (a prompt key for a streaming dataset). Every process knows every source (refills are drawn by a
sampler identical on all processes), so no prompt row crosses processes; a stream's refill rows are the exception,
read by the main process and broadcast (stream.py).
"""

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from accelerate.utils import gather_object

from .layout import call_order
from .replay import generate_like_trl
from .skipping_trainer import ROW_INDEX_KEY
from .selection import group_granularity


@dataclass
class GeneratedRow:
    """One generated completion with everything needed to replay it into TRL's scoring pass. A plain picklable
    record: rows that change process are pickled whole, so extra per-row fields travel with them. Its rewards are
    not in it: every process knows every row's rewards (`GeneratedPool`, `CarriedGroups`)."""

    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    logprobs: list[float] | None
    extra: dict = field(default_factory=dict)
    extra_logs: dict = field(default_factory=dict)
    # Log-probs under the policy that generated the row, recorded only for a row carried to the next batch.
    generating_logps: torch.Tensor | None = None
    # With tools: the completion before TRL's tool loop, the loop's result and this row's tool-call counts (replay.py).
    tool_rollout: dict | None = None
    # With environment_factory: the prompt TRL generated from, the environment's observation appended.
    generation_prompt: list | str | None = None


@dataclass
class GeneratedPool:
    """A step's generated rows in generation order: every row's holder and rewards (known to every process) and
    this process's own rows."""

    holders: list[int] = field(default_factory=list)
    rewards: list[torch.Tensor] = field(default_factory=list)
    local: dict[int, GeneratedRow] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.holders)

    def all_rewards(self) -> torch.Tensor:
        return torch.cat(self.rewards)


@contextmanager
def metric_gathers_skipped(accelerator):
    """Within TRL 1.16's `_generate`, `accelerator.gather` serves only its completion metrics (lengths, truncation,
    tool calls), which phase 1 discards: the trained batch's are logged by phase 2. Every process skips them alike,
    so they cost no traffic and no process waits on a gather another skipped. (Prompts and completions that vLLM
    server mode gathers and scatters go through other functions and are unaffected.)"""
    patched = accelerator.__dict__.get("gather")
    accelerator.gather = lambda tensor: tensor
    try:
        yield
    finally:
        if patched is None:
            del accelerator.gather
        else:
            accelerator.gather = patched


class GenerationRoundsMixin:
    """Generation calls of `DynamicSamplingMixin`'s phase 1; see the module docstring."""

    def _first_segment(self, inputs: list[dict]) -> list[int | None]:
        """Sources of the dataloader's batch over all processes. Without skipping every process generates its own
        rows; with skipping the batch's dataset indices are gathered (one integer per row) and the rule replaces
        prompts predicted degenerate."""
        num_rows = len(inputs) * self.accelerator.num_processes
        if self._streaming:
            self._begin_stream_step(inputs)
        if not self._skipping:
            return [None] * num_rows
        local_indices = torch.tensor(
            [self._row_key(row) for row in inputs], dtype=torch.long, device=self.accelerator.device
        )
        indices = self.accelerator.gather(local_indices).tolist()
        if min(indices) < 0:
            raise RuntimeError(
                "skip_degenerate_prompts: a training batch row carries no dataset index; the training dataloader "
                "must be built by the trainer's own get_train_dataloader."
            )
        first = indices[:: self.num_generations]
        return [index for index in self._skip_predicted_degenerate(first) for _ in range(self.num_generations)]

    def _begin_stream_step(self, inputs: list[dict]) -> None:
        """Tells the stream refill which prompts the batch holds, so none is drawn again. With skipping, a
        dataloader prompt may be generated by another process, which has no index to read it back by: the rows
        are gathered (prompt rows, not generated ones)."""
        if self._skipping:
            rows = gather_object([{k: v for k, v in row.items() if k != ROW_INDEX_KEY} for row in inputs])
            self._refill_sampler.begin_step([self._row_key(row) for row in rows], rows)
            return
        local_keys = torch.tensor([self._row_key(row) for row in inputs], device=self.accelerator.device)
        self._refill_sampler.begin_step(self.accelerator.gather(local_keys).tolist())

    def _refill_sources(self, num_groups: int) -> list[int]:
        if num_groups == 0:
            return []
        indices = self._draw_prompt_indices(num_groups)
        if self._streaming:
            # A stream may run dry: keep whole groups that split evenly over the processes.
            granularity = group_granularity(self.num_generations, self.accelerator.num_processes)
            whole = len(indices) // granularity * granularity
            self._forget_last_picks(len(indices) - whole)
            indices = indices[:whole]
        return [index for index in indices for _ in range(self.num_generations)]

    def _round_calls(self, segments: list[list], batch_rows: int) -> list[list[list]]:
        """A round's generation calls. Plain `generate` holds a whole call in memory, so it gets the round one
        generation batch (`batch_rows`) at a time; vLLM batches internally and gets the round in one call."""
        if self.use_vllm:
            return [[segment for segment in segments if segment]]
        rows = [source for segment in segments for source in segment]
        return [[rows[start : start + batch_rows]] for start in range(0, len(rows), batch_rows)]

    def _materialize(self, source, flat_index: int, inputs: list[dict], own_by_index: dict) -> dict:
        if source is None:
            return dict(inputs[flat_index - self.accelerator.process_index * len(inputs)])
        own = own_by_index.get(source)
        if own:
            return {k: v for k, v in own.pop().items() if k != ROW_INDEX_KEY}
        return self._refill_row(source)

    def _generate_call(self, segments: list[list], inputs: list[dict], own_by_index: dict, pool: GeneratedPool) -> None:
        """Generates and scores this process's share of `segments`, adding its rows to `pool`."""
        num_processes, process = self.accelerator.num_processes, self.accelerator.process_index
        order = call_order([len(segment) for segment in segments], num_processes)
        flat = [source for segment in segments for source in segment]
        share = len(flat) // num_processes
        mine = order[process * share : (process + 1) * share]
        local_rows = [self._materialize(flat[i], i, inputs, own_by_index) for i in mine]
        # TRL prepares the prompts (environment resets and observations, tools, images) and generates.
        trl_scoring = super(GenerationRoundsMixin, self)._generate_and_score_completions
        prompts, generated, tool_rollouts = generate_like_trl(
            self, trl_scoring, local_rows, around_generate=lambda: metric_gathers_skipped(self.accelerator)
        )
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _, _ = generated
        for key, values in extra_fields.items():
            for i, row in enumerate(local_rows):
                row[key] = values[i] if isinstance(values, list) else values

        pending_logs = self._pending_extra_logs
        self._pending_extra_logs = type(pending_logs)(list)
        # TRL gathers the rewards of every process's rows, in process order.
        rewards = self._calculate_rewards(local_rows, prompts, completions, completion_ids).cpu()
        round_logs, self._pending_extra_logs = self._pending_extra_logs, pending_logs

        base = len(pool)
        in_generation_order = torch.empty_like(rewards)
        in_generation_order[torch.tensor(order)] = rewards
        holders = [0] * len(flat)
        for position, number in enumerate(order):
            holders[number] = position // share
        pool.holders.extend(holders)
        pool.rewards.append(in_generation_order)
        for i, number in enumerate(mine):
            pool.local[base + number] = GeneratedRow(
                row=local_rows[i],
                prompt_ids=prompt_ids[i],
                completion_ids=completion_ids[i],
                tool_mask=tool_mask[i] if tool_mask is not None else None,
                logprobs=logprobs[i] if logprobs is not None else None,
                extra={k: v[i] if isinstance(v, list) else v for k, v in extra_fields.items()},
                extra_logs={k: v[i] for k, v in round_logs.items() if len(v) == len(local_rows)},
                tool_rollout=tool_rollouts[i],
                generation_prompt=prompts[i] if self.environment_factories is not None else None,
            )

    def _sampling_scores(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self._sampling_metric_index is not None:
            return rewards_per_func[:, self._sampling_metric_index]
        weights = self.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return total
