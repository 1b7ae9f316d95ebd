"""`DynamicSampler`: DAPO's dynamic sampling as one object that owns all its state, called by the trainer's
`_generate_and_score_completions` (trainer.py) for phase 1 of a training step.

Phase 1, `sample_batch`: generation rounds until the step has enough informative groups, then the keep/carry/drop
decision, which every process takes alike. The trainer then replays this process's trained rows into TRL's
unchanged `_generate_and_score_completions` (phase 2, trl_hooks.py).

A round (`generate_round`): each segment of the round (the dataloader's batch, a refill) is split over the
processes in contiguous shares (`call_order`); each process generates and scores its share through TRL's own
`_generate` and `_calculate_rewards` (so every generation backend and reward function runs as in `GRPOTrainer`),
and one `gather_object` gives every process every row of the round. Every process then takes the decision
(`selection.decide_round`) on the step's groups in generation order, and trains its contiguous slice of the batch,
carried groups first. The gather costs about 6 times the bytes of moving only the rows that must change process, a
few percent of a gradient all-reduce at scale (docs/results/collective_traffic).

With `dynamic_sampling="drop"` there are no rounds (`drop_flat_groups`).

Rows to generate are named by their source: `None` for a row of this process's own dataloader batch, or a dataset
index (a prompt key for a stream), drawn alike on every process (prompt_sources.py). docs/architecture.md follows
one step through it.
"""

import math
from dataclasses import dataclass, field

import torch
from accelerate.utils import gather_object
from transformers.utils import logging

from ..rewards.overlong import is_soft_overlong_punishment
from .carry import CarriedRatioWindow, record_generating_logps
from .generate_calls import GenerateCalls
from .prompt_sources import STREAM_KEY_SPACE, DatasetIndices, RefillSampler, StreamRefill
from .selection import (
    ALL_GROUPS_REWARD_METRIC,
    KEPT_ROWS_SCALE_KEY,
    NO_SIGNAL_STEPS,
    PassRateTracker,
    decide_round,
    degenerate_outcomes,
    first_round_extra_groups,
    groups_to_request,
    informative_group_mask,
    kept_rows_loss_scale,
    no_signal_warning,
    resolve_sampling_options,
    total_reward_sum,
)
from .trl_hooks import generate_like_trl, is_vision_language, policy_logps, rewards_like_trl, train_metrics
from .trl_hooks import trl_metrics_kept

logger = logging.get_logger(__name__)

STREAM_RAN_DRY = (
    "The streaming train_dataset had no unread prompt left for this batch: a whole pass over it gave none that "
    "was not already in the batch."
)


@dataclass
class GeneratedRow:
    """One generated completion with everything needed to replay it into TRL's scoring pass, its rewards included
    (one per reward function, as TRL's `_calculate_rewards` returns them). A plain picklable record: every process
    receives every row of a round, extra per-row fields included."""

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
class TrainedBatch:
    """This process's rows of the trained batch in batch order (each with its rewards), and how many carried rows
    each process trains (known to every process)."""

    local: list[GeneratedRow]
    carried_rows: list[int]


def call_order(segment_lengths: list[int], num_processes: int) -> list[int]:
    """The generation-order number of each row of a round, in process order.

    Process `p` generates the `p`-th contiguous share of every segment, the rows `order[p * n : (p + 1) * n]`,
    `n = sum(segment_lengths) // num_processes`; with a single segment the order is the identity.
    """
    if num_processes < 1 or any(length < 0 or length % num_processes for length in segment_lengths):
        raise ValueError(
            f"call_order: every segment must split evenly over num_processes={num_processes}, got lengths "
            f"{segment_lengths}."
        )
    starts = [sum(segment_lengths[:i]) for i in range(len(segment_lengths))]
    return [
        row
        for process in range(num_processes)
        for start, length in zip(starts, segment_lengths, strict=True)
        for row in range(start + process * length // num_processes, start + (process + 1) * length // num_processes)
    ]


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
        self.enabled = bool(args.dynamic_sampling)  # "regenerate", "drop" or False
        self.scored_rewards = None  # "drop": the rewards TRL's scoring pass just computed
        self.calls = GenerateCalls(trainer)
        self.pass_rate = PassRateTracker()
        self.carried: list[list[GeneratedRow]] = []
        self.carried_ratio = CarriedRatioWindow()
        self.metric_index = None
        self.refill = None
        self.skipper = None
        self.options = resolve_sampling_options(
            args.dynamic_sampling, args.skip_degenerate_prompts, args.dynamic_sampling_carry_surplus,
            args.gradient_accumulation_steps, args.steps_per_generation, args.num_iterations, is_vision_language(trainer),
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
        if dataset is None or args.dynamic_sampling == "drop":
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
        self.indices = DatasetIndices("skip_degenerate_prompts" if self.skipper else None, self.streaming, dataset)

    @property
    def streaming(self) -> bool:
        return isinstance(self.refill, StreamRefill)

    @property
    def batch_by_index(self) -> bool:
        """Whether dataloader rows are named by dataset index (a stream's prompt key), so that any process can
        generate any of them: for the skipping rule's picks."""
        return self.indices.reason is not None

    # Phase 1: generation rounds, then the decision every process takes alike.

    def sample_batch(self, inputs: list[dict], trl_generate_and_score) -> TrainedBatch:
        """This process's rows of the step's trained batch. `trl_generate_and_score` is `GRPOTrainer`'s own
        `_generate_and_score_completions`, which each round runs up to the end of `_generate`."""
        trainer = self.trainer
        args, group_size = trainer.args, trainer.num_generations
        num_processes, process = trainer.accelerator.num_processes, trainer.accelerator.process_index
        first_segment = self.first_segment(inputs)
        batch_groups = len(first_segment) // group_size
        # Carried groups are always trained now, so none is carried twice.
        carried, self.carried = self.carried, []
        needed = batch_groups - len(carried)
        own_by_index = self.own_rows_by_index(inputs)

        def run_round(segments):
            return self.generate_round(segments, inputs, own_by_index, trl_generate_and_score)

        with trl_metrics_kept(trainer):  # TRL's metrics describe the trained batch, which phase 2 logs
            groups, generated, scores, rounds = self.rounds_until_enough(first_segment, len(carried), run_round)
        informative = informative_group_mask(scores, args.dynamic_sampling_tolerance)
        found, seen = int(informative.sum()), len(groups)

        decision = decide_round(
            informative.tolist(), needed, fill=args.dynamic_sampling_on_exhausted == "fill",
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
        # The batch as TRL lays it out over the processes: carried groups first, process `p` training rows
        # `[p * len(inputs), (p + 1) * len(inputs))`. Advantages are normalised per group and the losses of "dapo",
        # "dr_grpo" and "grpo" sum over rows, so they do not depend on which process trains which group.
        batch = [row for group in carried + [groups[i] for i in decision.trained] for row in group]
        rows_per_process, carried_rows = len(inputs), len(carried) * group_size
        local = batch[process * rows_per_process : (process + 1) * rows_per_process]
        # Recorded now, before this step's optimizer update: this is the policy that generated the rows.
        self.carried = [groups[i] for i in decision.carried]
        record_generating_logps(trainer, [row for group in self.carried for row in group], local[0], policy_logps)
        self.log_step(groups, generated, scores, informative, decision, rounds, len(carried))
        carried_per_process = [carried_rows - p * rows_per_process for p in range(num_processes)]
        return TrainedBatch(local, [min(max(count, 0), rows_per_process) for count in carried_per_process])

    def drop_flat_groups(self, output: dict) -> dict:
        """dynamic_sampling="drop": TRL's scored generation batch `output` (this process's rows) with the rows of flat
        groups masked out of the loss, its normaliser and the KL term: their `completion_mask` is zeroed, as TRL's
        `mask_truncated_completions` zeroes a truncated row's, `num_items_in_batch` is counted again over the kept
        tokens of every process, and the row-normalised objectives get `kept_rows_loss_scale` (applied by the
        trainer's `_compute_loss`). Every process keeps all its rows, so all run the same forward and backward
        calls, as ZeRO-3 and FSDP need, even when all of a process's rows are flat.

        Flat is decided on the sampling metric (`dynamic_sampling_metric`, `dynamic_sampling_tolerance`), as
        regeneration decides it, over every process's rewards (TRL's `_calculate_rewards` gathers them), so every
        process takes the same decision."""
        trainer, group_size = self.trainer, self.trainer.num_generations
        rewards, self.scored_rewards = self.scored_rewards, None
        if rewards is None:
            raise RuntimeError(
                'dynamic_sampling="drop": TRL\'s _generate_and_score_completions computed no rewards through '
                "_calculate_rewards; this TRL version is not supported with it. Set dynamic_sampling=\"regenerate\"."
            )
        rewards = rewards.cpu()
        scores = self.sampling_scores(rewards).view(-1, group_size)
        informative = informative_group_mask(scores, trainer.args.dynamic_sampling_tolerance)
        kept_rows = informative.repeat_interleave(group_size)
        completion_mask = output["completion_mask"]
        local_rows = completion_mask.shape[0]
        start = trainer.accelerator.process_index * local_rows
        keep = kept_rows[start : start + local_rows].to(completion_mask.device)
        output["completion_mask"] = completion_mask * keep.unsqueeze(1).to(completion_mask.dtype)
        loss_mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            loss_mask = loss_mask * output["tool_mask"]
        output["num_items_in_batch"] = trainer.accelerator.gather(loss_mask.sum()).sum()
        scale = kept_rows_loss_scale(trainer.args.loss_type, kept_rows.numel(), int(kept_rows.sum()))
        output[KEPT_ROWS_SCALE_KEY] = torch.tensor(scale, device=completion_mask.device)
        metrics = self.record_outcomes(scores, informative, rewards)
        metrics["dynamic_sampling/kept_rows_frac"].append(kept_rows.float().mean().item())
        return output

    def rounds_until_enough(self, first_segment: list, carried_groups: int, run_round) -> tuple:
        """Generation rounds until the step has enough informative groups or `dynamic_sampling_max_rounds` ran:
        the dataloader's batch with a first refill sized from earlier steps' pass rate, then refills sized from this
        step's. Returns every process's groups, rows and sampling scores `(groups, G)`, in generation order, and the
        number of rounds."""
        trainer = self.trainer
        args, group_size, num_processes = trainer.args, trainer.num_generations, trainer.accelerator.num_processes
        batch_groups = len(first_segment) // group_size
        needed = batch_groups - carried_groups
        # Refills come in multiples of the number of processes, so that every process generates whole groups.
        # Where the dataloader's groups straddle processes, each process generates its own rows of them, as in
        # `GRPOTrainer`; the gather puts every group back together.
        extra_groups = first_round_extra_groups(batch_groups, carried_groups, self.pass_rate.estimate, num_processes)
        segments = [first_segment, self.refill_sources(extra_groups)]
        groups, generated, scores = [], [], torch.empty(0, group_size)
        for rounds in range(1, args.dynamic_sampling_max_rounds + 1):
            rows = run_round(segments)
            generated += rows
            groups += [rows[start : start + group_size] for start in range(0, len(rows), group_size)]
            round_scores = self.sampling_scores(torch.tensor([row.rewards for row in rows]))
            scores = torch.cat([scores, round_scores.view(-1, group_size)])
            found = int(informative_group_mask(scores, args.dynamic_sampling_tolerance).sum())
            if found >= needed or rounds == args.dynamic_sampling_max_rounds:
                break
            request = groups_to_request(needed - found, found / len(groups), batch_groups, num_processes)
            segments = [self.refill_sources(request)]
            if not segments[0]:  # a stream with no unread prompt left
                break
        return groups, generated, scores, rounds

    def first_segment(self, inputs: list[dict]) -> list[int | None]:
        """Sources of the dataloader's batch over all processes. Usually every process generates its own rows; with
        skipping, the batch's dataset indices are gathered (one integer per row), so that any process can generate
        any group, and the skipping rule replaces prompts predicted degenerate."""
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
        """Tells the stream refill which prompts the batch holds, so none is drawn again. With skipping, a dataloader
        prompt may be generated by another process, which has no index to read it back by: the rows are gathered
        (prompt rows, not generated ones)."""
        if self.batch_by_index:
            rows = gather_object(list(inputs))
            self.refill.begin_step([self.indices.key(row) for row in rows], rows)
            return
        accelerator = self.trainer.accelerator
        local_keys = torch.tensor([self.indices.key(row) for row in inputs], device=accelerator.device)
        self.refill.begin_step(accelerator.gather(local_keys).tolist())

    def refill_sources(self, num_groups: int) -> list[int]:
        """Sources of `num_groups` refill groups."""
        if num_groups == 0:
            return []
        if self.skipper is None:
            keys = self.refill.draw(num_groups)
        else:
            keys = self.skipper.draw(num_groups, self.trainer.state.global_step)
        if self.streaming:
            # A stream may run dry: keep as many groups as give every process whole groups.
            num_processes = self.trainer.accelerator.num_processes
            whole = len(keys) // num_processes * num_processes
            if self.skipper is not None:
                self.skipper.forget(len(keys) - whole)
            keys = keys[:whole]
        return [key for key in keys for _ in range(self.trainer.num_generations)]

    def own_rows_by_index(self, inputs: list[dict]) -> dict[int, list[dict]]:
        """This process's dataloader rows by dataset index (a stream's prompt key), for the skipping rule's picks
        (empty otherwise)."""
        own: dict[int, list[dict]] = {}
        if self.batch_by_index:
            for row in inputs:
                own.setdefault(self.indices.key(row), []).append(row)
        return own

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
    ) -> list[GeneratedRow]:
        """Generates and scores this process's share of each of `segments` and returns every process's rows of the
        round, in generation order."""
        trainer = self.trainer
        num_processes = trainer.accelerator.num_processes
        order = call_order([len(segment) for segment in segments], num_processes)
        flat = [source for segment in segments for source in segment]
        share = len(flat) // num_processes
        mine = order[trainer.accelerator.process_index * share :][:share]
        local_rows = [self.prompt_row(flat[i], i, inputs, own_by_index) for i in mine]
        # TRL prepares the prompts (environment resets and observations, tools, images) and generates. The round's
        # first turn is the one call of `_generate_single_turn` every process makes for it: the memory plan's
        # gather goes there (generate_calls.py).
        with self.calls.planned_round():
            prompts, generated, tool_rollouts = generate_like_trl(trainer, trl_generate_and_score, local_rows)
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, _, _ = generated
        for key, values in extra_fields.items():
            for i, row in enumerate(local_rows):
                row[key] = values[i] if isinstance(values, list) else values

        # TRL's, gathered: every process's rows, in process order.
        rewards, round_logs = rewards_like_trl(trainer, local_rows, prompts, completions, completion_ids)
        rewards = rewards.cpu()
        if rewards.shape[0] != len(flat):
            raise RuntimeError(
                f"dynamic_sampling: TRL's _calculate_rewards returned {rewards.shape[0]} rows for the round's "
                f"{len(flat)}; this TRL version is not supported with dynamic sampling. Set dynamic_sampling=False."
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
            )
            for i in range(len(local_rows))
        ]
        if num_processes > 1:
            rows = gather_object(rows)
        in_generation_order = [None] * len(rows)
        for number, row, row_rewards in zip(order, rows, rewards.tolist(), strict=True):
            row.rewards = row_rewards
            in_generation_order[number] = row
        return in_generation_order

    def sampling_scores(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        if self.metric_index is not None:
            return rewards_per_func[:, self.metric_index]
        weights = self.trainer.reward_weights.to(rewards_per_func.device)
        total = (rewards_per_func * weights).nansum(dim=1)
        total[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return total

    def record_outcomes(self, scores: torch.Tensor, informative: torch.Tensor, rewards: torch.Tensor) -> dict:
        """What both modes log of a step's generated groups (`scores`: `(groups, G)`, `rewards`: per row and reward
        function): updates the pass rate, warns of a run with no signal, and logs the generated groups, the pass
        rate and the all-correct and all-wrong shares. Returns TRL's train metrics, for the caller's own."""
        trainer = self.trainer
        found, seen = int(informative.sum()), scores.shape[0]
        self.pass_rate.update(found, seen)
        if self.pass_rate.steps_without_signal == NO_SIGNAL_STEPS:
            values = {name: [None if math.isnan(value) else value for value in rewards[:, i].tolist()]
                      for i, name in enumerate(trainer.reward_func_names)}  # fmt: skip
            logger.warning(no_signal_warning(NO_SIGNAL_STEPS, values))
        metrics = train_metrics(trainer)
        all_correct, all_wrong = degenerate_outcomes(scores, informative)
        metrics["dynamic_sampling/generated_groups"].append(float(seen))
        metrics["dynamic_sampling/pass_rate"].append(found / seen)
        metrics["dynamic_sampling/all_correct_frac"].append(all_correct / seen)
        metrics["dynamic_sampling/all_wrong_frac"].append(all_wrong / seen)
        return metrics

    def log_step(self, groups, generated, scores, informative, decision, rounds: int, carried_groups: int) -> None:
        """Updates the pass rate and the skipping history, warns of a run with no signal, and logs the step's
        sampling metrics, all from every process's groups (`scores`: `(groups, G)`) and rows (`generated`)."""
        trainer = self.trainer
        rewards = torch.tensor([row.rewards for row in generated])
        metrics = self.record_outcomes(scores, informative, rewards)
        if self.skipper is not None:
            self.skipper.record(scores, informative, trainer.state.global_step, metrics)
        reward_sum, completions = total_reward_sum(rewards, trainer.reward_weights)
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        # Carried groups are informative groups of the trained batch too.
        metrics["dynamic_sampling/kept_groups"].append(float(len(decision.kept) + carried_groups))
        metrics["dynamic_sampling/filled"].append(float(bool(decision.filled)))
        metrics["dynamic_sampling/dropped_informative_groups"].append(float(len(decision.dropped)))
        if self.options.carry_surplus:
            metrics["dynamic_sampling/carried_groups"].append(float(carried_groups))
        # TRL's `num_tokens` counts the trained batch only; this is the generation work the step really cost.
        metrics["dynamic_sampling/generated_tokens"].append(
            float(sum(len(row.completion_ids) for row in generated))
        )
        # TRL's `reward` covers the trained (informative) groups only; this is what it would show without filtering.
        metrics[ALL_GROUPS_REWARD_METRIC].append(reward_sum / completions)


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
