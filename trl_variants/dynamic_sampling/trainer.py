"""Trainer glue for dynamic sampling: generation rounds, the keep/drop decision and the replay into TRL.

Phase 1 generates and scores rounds of prompt groups through TRL's own `_generate` and `_calculate_rewards`
(so vLLM server/colocate modes and weight sync keep working, and each reward function runs once per
completion) until the batch can be filled with informative groups. Phase 2 runs TRL's unchanged
`_generate_and_score_completions` once on the kept groups, with generation and reward computation replayed from
phase 1. Old-policy and reference log-probs, vLLM importance weights, advantages, `num_items_in_batch` and TRL's
own metrics are therefore computed on the trained batch only, and by TRL's code.

Every decision is taken on data gathered from all processes, so every process takes the same decisions, calls
the same collectives the same number of times and ends with its usual number of rows, groups contiguous.
"""

import copy
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object
from transformers.utils import logging

from ..rewards.overlong import is_soft_overlong_punishment
from .carry import (
    first_round_extra_groups_after_carry,
    load_carried_rows,
    plan_carry,
    record_generating_logps,
    save_carried_rows,
    scoring_with_generating_logps,
)
from .reward_metric import ALL_GROUPS_REWARD_METRIC, mean_total_reward
from .selection import (
    PassRateTracker,
    RefillSampler,
    degenerate_outcomes,
    group_granularity,
    groups_to_request,
    informative_group_mask,
    select_groups,
)
from .skipping_trainer import PromptSkippingMixin

logger = logging.get_logger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
# The groups carried into the next generation batch when a checkpoint is written (`dynamic_sampling_carry_surplus`).
CARRIED_FILE = "dynamic_sampling_carried_groups.pt"


@dataclass
class GeneratedRow:
    """One generated completion with everything needed to replay it into TRL's scoring pass."""

    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    logprobs: list[float] | None
    extra: dict = field(default_factory=dict)
    extra_logs: dict = field(default_factory=dict)
    rewards: torch.Tensor | None = None
    # Log-probs under the policy that generated the row, recorded only for a row carried to the next batch.
    generating_logps: torch.Tensor | None = None


class DynamicSamplingExhaustedError(RuntimeError):
    """Raised when `dynamic_sampling_on_exhausted="raise"` and the rounds ran out before the batch was full."""


class DynamicSamplingMixin(PromptSkippingMixin):
    """Adds DAPO's dynamic sampling to a `GRPOTrainer` subclass by overriding `_generate_and_score_completions`
    in train mode; evaluation is never filtered. With `skip_degenerate_prompts`, prompts predicted degenerate are
    skipped before generation (`PromptSkippingMixin`)."""

    def _setup_dynamic_sampling(self) -> None:
        args = self.args
        self._sampling_metric_index = None
        self._refill_sampler = None
        self._pass_rate = PassRateTracker()
        # Surplus informative groups' rows carried to the next generation batch; checkpoints save them (carry.py).
        self._carried_rows: list[GeneratedRow] = []
        if not args.dynamic_sampling:
            return
        # Phase 2 replays completions through TRL's rollout hook, which carries neither tool calls nor images.
        unsupported = {
            "tools": bool(self.tools),
            "environment_factory": self.environment_factories is not None,
            "vision-language models": self._is_vlm,
        }
        for name, present in unsupported.items():
            if present:
                raise ValueError(
                    f"dynamic_sampling=True does not support `{name}` yet; set dynamic_sampling=False to train with it."
                )
        self._sampling_metric_index = self._resolve_sampling_metric(args.dynamic_sampling_metric)
        dataset = self.train_dataset
        if dataset is None:
            return
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise ValueError(
                f"dynamic_sampling=True needs a map-style train_dataset to draw refill prompts from, got "
                f"{type(dataset).__name__}; convert it (e.g. with Dataset.from_generator) or set dynamic_sampling=False."
            )
        if {"image", "images"} & set(getattr(dataset, "column_names", None) or []):
            raise ValueError(
                "dynamic_sampling=True does not support image datasets yet; set dynamic_sampling=False to train with "
                "image prompts."
            )
        self._refill_sampler = RefillSampler(dataset_size=len(dataset), seed=args.seed + 1)
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
        batch = self._sample_informative_batch(inputs)
        process = self.accelerator.process_index
        local = batch[process * len(inputs) : (process + 1) * len(inputs)]
        with self._replaying(local, batch), scoring_with_generating_logps(self, local, batch) as complete:
            return complete(super()._generate_and_score_completions([row.row for row in local]))

    # Phase 1: generation rounds.

    def _sample_informative_batch(self, inputs: list[dict]) -> list[GeneratedRow]:
        args, group_size = self.args, self.num_generations
        all_inputs = self._skip_predicted_degenerate(gather_object(inputs))
        batch_groups = len(all_inputs) // group_size
        granularity = group_granularity(group_size, self.accelerator.num_processes)
        # Carried groups come first and are always trained now, so none is carried twice.
        carried, self._carried_rows = self._carried_rows, []
        carried_groups = len(carried) // group_size
        needed = batch_groups - carried_groups
        # Equal to `first_round_extra_groups` when nothing is carried.
        extra_groups = first_round_extra_groups_after_carry(
            batch_groups, carried_groups, self._pass_rate.estimate, granularity
        )
        round_rows = all_inputs + self._draw_refill_rows(extra_groups)

        # Phase 1's own `_generate` calls would log TRL's completion metrics and token counts for every round;
        # they are restored so that TRL's metrics describe the trained batch, which phase 2 logs.
        saved_metrics = copy.deepcopy(self._metrics["train"])
        saved_tokens_seen = self.state.num_input_tokens_seen

        generated: list[GeneratedRow] = []
        group_scores: list[torch.Tensor] = []
        rounds = 0
        while True:
            rounds += 1
            # A round can be several generation batches. Plain `generate` holds a whole call in memory, so it gets
            # the round one generation batch at a time; vLLM batches internally and gets the round in one call.
            slice_rows = len(round_rows) if self.use_vllm else len(all_inputs)
            for start in range(0, len(round_rows), slice_rows):
                records, scores = self._generate_round(round_rows[start : start + slice_rows])
                generated.extend(records)
                group_scores.append(scores.view(-1, group_size).cpu())
            all_scores = torch.cat(group_scores)
            informative = informative_group_mask(all_scores, args.dynamic_sampling_tolerance)
            found, seen = int(informative.sum()), len(informative)
            if found >= needed or rounds >= args.dynamic_sampling_max_rounds:
                break
            request = groups_to_request(needed - found, found / seen, batch_groups, granularity)
            round_rows = self._draw_refill_rows(request)

        self._metrics["train"] = saved_metrics
        self.state.num_input_tokens_seen = saved_tokens_seen

        selection = select_groups(informative.tolist(), needed, fill=args.dynamic_sampling_on_exhausted == "fill")
        if len(selection.indices) < needed:
            raise DynamicSamplingExhaustedError(
                f"Dynamic sampling found {found} informative groups of the {needed} needed after {rounds} "
                f"rounds (max {args.dynamic_sampling_max_rounds}): pass rate {found / seen:.3f} over {seen} generated "
                "groups. Raise dynamic_sampling_max_rounds, use prompts of a difficulty where the policy is sometimes "
                'right and sometimes wrong, or set dynamic_sampling_on_exhausted="fill" to train on.'
            )
        if selection.filled:
            logger.warning(
                f"Dynamic sampling: only {found} of {needed} groups were informative after {rounds} rounds; "
                f"filled the batch with {len(selection.filled)} degenerate groups (no signal on the sampling metric)."
            )
        capacity = batch_groups if args.dynamic_sampling_carry_surplus else 0
        surplus = plan_carry(informative.tolist(), selection.indices, capacity)
        self._carried_rows = [generated[group * group_size + k] for group in surplus.carried for k in range(group_size)]
        # Recorded now, before this step's optimizer update: this is the policy that generated the rows.
        record_generating_logps(self, self._carried_rows)
        all_correct, all_wrong = degenerate_outcomes(all_scores, informative)
        self._pass_rate.update(found, seen)
        self._record_prompt_outcomes(all_scores, informative)
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
        if args.dynamic_sampling_carry_surplus:
            metrics["dynamic_sampling/carried_groups"].append(float(carried_groups))
        # TRL's `num_tokens` counts the trained batch only; this is the generation work the step really cost.
        metrics["dynamic_sampling/generated_tokens"].append(float(sum(len(row.completion_ids) for row in generated)))
        # TRL's `reward` covers the trained (informative) groups only; this is what it would show without filtering.
        metrics[ALL_GROUPS_REWARD_METRIC].append(
            mean_total_reward(torch.stack([row.rewards for row in generated]), self.reward_weights)
        )
        fresh = [generated[group * group_size + k] for group in selection.indices for k in range(group_size)]
        return carried + fresh

    def _draw_refill_rows(self, num_groups: int) -> list[dict]:
        if num_groups == 0:
            return []
        indices = self._draw_prompt_indices(num_groups)
        return [dict(self.train_dataset[index]) for index in indices for _ in range(self.num_generations)]

    def _generate_round(self, global_rows: list[dict]) -> tuple[list[GeneratedRow], torch.Tensor]:
        """Generates and scores this process's share of `global_rows`; returns every process's rows and scores."""
        share = len(global_rows) // self.accelerator.num_processes
        start = self.accelerator.process_index * share
        local_rows = [dict(row) for row in global_rows[start : start + share]]
        prompts = [row["prompt"] for row in local_rows]
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _, _ = self._generate(prompts)
        for key, values in extra_fields.items():
            for i, row in enumerate(local_rows):
                row[key] = values[i] if isinstance(values, list) else values

        pending_logs = self._pending_extra_logs
        self._pending_extra_logs = type(pending_logs)(list)
        rewards = self._calculate_rewards(local_rows, prompts, completions, completion_ids)
        round_logs, self._pending_extra_logs = self._pending_extra_logs, pending_logs

        records = [
            GeneratedRow(
                row=global_rows[start + i],
                prompt_ids=prompt_ids[i],
                completion_ids=completion_ids[i],
                tool_mask=tool_mask[i] if tool_mask is not None else None,
                logprobs=logprobs[i] if logprobs is not None else None,
                extra={k: v[i] if isinstance(v, list) else v for k, v in extra_fields.items()},
                extra_logs={k: v[i] for k, v in round_logs.items() if len(v) == len(local_rows)},
            )
            for i in range(len(local_rows))
        ]
        records = gather_object(records)
        for record, reward_row in zip(records, rewards.cpu(), strict=True):
            record.rewards = reward_row
        return records, self._sampling_scores(rewards)

    def _sampling_scores(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self._sampling_metric_index is not None:
            return rewards_per_func[:, self._sampling_metric_index]
        weights = self.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return total

    # Phase 2: replay into TRL's scoring pass.

    @contextmanager
    def _replaying(self, local: list[GeneratedRow], batch: list[GeneratedRow]):
        device = self.accelerator.device
        batch_rewards = torch.stack([row.rewards for row in batch]).to(device)
        extra_keys = sorted({key for row in local for key in row.extra})

        def replay_generation(prompts, trainer):
            output = {
                "prompt_ids": [row.prompt_ids for row in local],
                "completion_ids": [row.completion_ids for row in local],
                "logprobs": None if local[0].logprobs is None else [row.logprobs for row in local],
            }
            if local[0].tool_mask is not None:
                output["env_mask"] = [row.tool_mask for row in local]
            for key in extra_keys:
                output[key] = [row.extra.get(key) for row in local]
            return output

        def replay_rewards(inputs, prompts, completions, completion_ids_list):
            return batch_rewards

        saved_rollout_func = self.rollout_func
        # TRL's rollout hook is its one entry point that accepts ready-made completions; `_generate` still
        # decodes them and logs the completion metrics of the trained batch.
        self.rollout_func = replay_generation
        self._calculate_rewards = replay_rewards
        for column in sorted({column for row in local for column in row.extra_logs}):
            self._pending_extra_logs[column].extend(row.extra_logs.get(column) for row in local)
        try:
            yield
        finally:
            self.rollout_func = saved_rollout_func
            del self._calculate_rewards

    # Checkpointing: the refill sampler continues after a resume instead of replaying the same prompts.

    def _dynamic_sampling_state(self) -> dict:
        return {
            "refill_sampler": self._refill_sampler.state_dict() if self._refill_sampler else None,
            "pass_rate_estimate": self._pass_rate.estimate,
            "skipping": self._skipping_state(),
        }

    def _save_dynamic_sampling_state(self, checkpoint_dir: str) -> None:
        if self.args.dynamic_sampling and self.args.should_save:
            with open(os.path.join(checkpoint_dir, STATE_FILE), "w") as state_file:
                json.dump(self._dynamic_sampling_state(), state_file)
            self._save_prompt_history(checkpoint_dir)
            if self.args.dynamic_sampling_carry_surplus:
                # Saved even when empty, so that a carrying run's checkpoint without this file reads as incomplete.
                save_carried_rows(self._carried_rows, os.path.join(checkpoint_dir, CARRIED_FILE))

    def _load_dynamic_sampling_state(self, checkpoint_dir: str) -> None:
        path = os.path.join(checkpoint_dir, STATE_FILE)
        if not (self.args.dynamic_sampling and os.path.exists(path)):
            return
        with open(path) as state_file:
            state = json.load(state_file)
        if state["refill_sampler"] is not None and self._refill_sampler is not None:
            self._refill_sampler.load_state_dict(state["refill_sampler"])
        self._pass_rate.estimate = state["pass_rate_estimate"]
        self._load_skipping_state(state.get("skipping"), checkpoint_dir)
        self._load_carried_rows(checkpoint_dir)

    def _load_carried_rows(self, checkpoint_dir: str) -> None:
        if not self.args.dynamic_sampling_carry_surplus:
            return
        path = os.path.join(checkpoint_dir, CARRIED_FILE)
        if not os.path.isfile(path):
            logger.warning(
                f"dynamic_sampling_carry_surplus: the checkpoint {checkpoint_dir} has no carried groups "
                f"({CARRIED_FILE}); it was saved without carrying, so the resumed run starts with none carried."
            )
            return
        self._carried_rows = [GeneratedRow(**fields) for fields in load_carried_rows(path)]
        if len(self._carried_rows) % self.num_generations:
            raise ValueError(
                f"{path} holds {len(self._carried_rows)} carried rows, not whole groups of num_generations="
                f"{self.num_generations}; resume with the num_generations the checkpoint was saved with."
            )
