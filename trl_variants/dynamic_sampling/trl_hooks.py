"""Every run-time interception of TRL in the package, and every use of a private name of TRL's trainer, in one place.

Each function here replaces or wraps one thing of TRL's (an instance attribute of the trainer or of its vLLM engine)
for the duration of a `with` block, and puts back what was there, or reads or calls one private name of the trainer
(the last section). Each docstring names the TRL 1.16 layout it relies on and its entry in
`trl_variants/trl_surface/entries.py` ("Entry: ..."); on a TRL release, read the entries that
`python -m trl_variants.trl_surface --trl-path ...` flags against the functions here naming them. Where the layout
can be checked at run time, the function checks it and fails naming the TRL version.

What is not here: overrides of `GRPOTrainer` methods, which subclass methods calling `super()` make (listed in
`DAPOTrainer`'s docstring, "Overrides"); and `vllm_cpu.keep_linear_weights_reloadable`, which patches vLLM, not TRL.

The sections follow when each runs: phase 1 (generation rounds, `sampler.py`), phase 2 (TRL's scoring pass over the
trained rows, `trainer.py`), every step (`reliability/trainer.py`), and reads and calls of private names. The one
such use left elsewhere is recorded, with why, in `trl_surface.entries.PRIVATE_USES_OUTSIDE_HOOKS`.

Tools and environments (docs/dynamic_sampling.md, "Tools, environments and vision-language models"): phase 1 runs
TRL's own prompt preparation (environment resets and observations, tool functions, images) and stops right after
`_generate`, so each episode is reset, generated and scored once; phase 2 replays the tool loop's recorded result
and hides the environments, so no tool runs and no environment resets twice. TRL counts tool calls per batch; a
rollout's share is the calls of its first `max_tool_calling_iterations` assistant messages, of which those that did
not return are failures (counted by wrapping this rollout's tool functions).

Everything recorded is plain data (lists, dicts, strings, numbers, images), so a row can be sent to every process.
"""

import copy
import inspect
import os
from contextlib import contextmanager, nullcontext

import torch
from accelerate.utils import gather
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import pad

from .carry import (
    CARRIED_ROWS_KEY,
    GENERATING_LOGPS_KEY,
    place_generating_logps,
    rows_to_score,
    scoring_rows_only,
    trl_computes_old_logps,
)

_MISSING = object()
LOGPS_METHOD = "_get_per_token_logps_and_entropies"


@contextmanager
def instance_override(owner, name: str, value):
    """Sets `owner.<name>` on the instance for the block, then restores what was there (a test's wrapper too)."""
    saved = owner.__dict__.get(name, _MISSING)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if saved is _MISSING:
            owner.__dict__.pop(name, None)
        else:
            owner.__dict__[name] = saved


# Phase 1: generation rounds.


class _Generated(BaseException):
    """Stops TRL's scoring pass right after generation, carrying what `_generate` got and returned.

    A `BaseException`, so that an `except Exception` TRL may add around `_generate` cannot swallow it; TRL's `finally`
    blocks and context managers run as on any exception. It never leaves `generate_like_trl`."""

    def __init__(self, prompts, outputs):
        super().__init__("generation done")
        self.prompts, self.outputs = prompts, outputs


def generate_like_trl(trainer, trl_generate_and_score, rows: list[dict]):
    """Runs `trl_generate_and_score(rows)` (GRPOTrainer's method) up to the end of `_generate` and returns the
    prompts TRL generated from, `_generate`'s outputs and, with tools, each row's `tool_rollout` record.

    TRL layout: `_generate_and_score_completions` prepares the prompts, then calls `self._generate(prompts)` once,
    read as an instance attribute; `_generate` runs `self._tool_call_loop` (an instance attribute too) with tools,
    whose tool functions are those of `self._sync_tool_dicts` and `self._async_tool_dicts`, one dict per row.
    Entries: `GRPOTrainer._generate_and_score_completions`, `GRPOTrainer._generate`, `GRPOTrainer._tool_call_loop`."""
    generate = trainer._generate
    tool_records = [None] * len(rows)

    def generate_then_stop(prompts):
        with _recording_tool_loop(trainer, tool_records):
            outputs = generate(prompts)
        raise _Generated(prompts, outputs)

    with instance_override(trainer, "_generate", generate_then_stop):
        try:
            trl_generate_and_score(rows)
        except _Generated as generated:
            return generated.prompts, generated.outputs, tool_records
    raise RuntimeError(
        "dynamic_sampling: TRL's _generate_and_score_completions returned without calling _generate; this TRL version "
        "is not supported with dynamic sampling. Set dynamic_sampling=False."
    )


def assistant_tool_calls(messages: list[dict], max_iterations: int) -> int:
    """Tool calls TRL's loop counted for one rollout: those of its first `max_iterations` assistant messages."""
    assistant = [message for message in messages if message.get("role") == "assistant"]
    return sum(len(message.get("tool_calls") or []) for message in assistant[:max_iterations])


def _counting(function, returned: list[int], row: int):
    if inspect.iscoroutinefunction(function):

        async def counted_async(**arguments):
            result = await function(**arguments)
            returned[row] += 1
            return result

        return counted_async

    def counted(**arguments):
        result = function(**arguments)
        returned[row] += 1
        return result

    return counted


@contextmanager
def _recording_tool_loop(trainer, records: list):
    """While TRL's `_generate` runs, records each row's first turn, the tool loop's result and the row's counts."""
    if not trainer.tools:
        yield
        return
    tool_call_loop = trainer._tool_call_loop

    def recording_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        first_ids = copy.deepcopy(completion_ids)
        first_logprobs = copy.deepcopy(logprobs)
        returned = [0] * len(completion_ids)
        for row, tools in enumerate(zip(trainer._sync_tool_dicts, trainer._async_tool_dicts, strict=True)):
            for table in tools:
                for name, function in list(table.items()):
                    table[name] = _counting(function, returned, row)
        result = tool_call_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields)
        _, final_completions, _, _, _, _, tool_images = result
        for row, messages in enumerate(final_completions):
            calls = assistant_tool_calls(messages, trainer.max_tool_calling_iterations)
            records[row] = {
                "first_turn_ids": first_ids[row],
                "first_turn_logprobs": None if first_logprobs is None else first_logprobs[row],
                "completions": messages,
                "calls": calls,
                "failures": calls - returned[row],
                "images": tool_images[row] if tool_images else [],
            }
        return result

    with instance_override(trainer, "_tool_call_loop", recording_loop):
        yield


def rewards_like_trl(trainer, rows: list[dict], prompts, completions, completion_ids):
    """TRL's `_calculate_rewards` on one phase 1 round's rows: every process's rewards, and the extra columns the
    reward functions logged for this process's rows, kept with those rows (`GeneratedRow.extra_logs`) instead of
    being queued for TRL's next log: for the call `_pending_extra_logs` is a fresh one, TRL's own put back after.

    TRL layout: `_pending_extra_logs` is a `defaultdict(list)` set in `__init__`, filled in place by
    `_calculate_rewards` (a reward function's `log_extra` values) and emptied in place when TRL logs completions.
    Entries: `GRPOTrainer.__init__`, `GRPOTrainer._calculate_rewards`."""
    round_logs = type(trainer._pending_extra_logs)(list)
    with instance_override(trainer, "_pending_extra_logs", round_logs):
        rewards = trainer._calculate_rewards(rows, prompts, completions, completion_ids)
    return rewards, round_logs


@contextmanager
def trl_metrics_kept(trainer):
    """TRL's training metrics and `state.num_input_tokens_seen` are put back after the block as they were before it:
    phase 1's own `_generate` calls log TRL's completion metrics and count tokens for every round, and TRL's metrics
    must describe the trained batch, which phase 2 logs.

    TRL layout: `_metrics["train"]` (`train_metrics`) is replaced whole, and `_generate` adds to
    `state.num_input_tokens_seen`. Entries: `GRPOTrainer.__init__`, `GRPOTrainer._generate`."""
    saved_metrics = copy.deepcopy(trainer._metrics["train"])
    saved_tokens_seen = trainer.state.num_input_tokens_seen
    try:
        yield
    finally:
        trainer._metrics["train"] = saved_metrics
        trainer.state.num_input_tokens_seen = saved_tokens_seen


@contextmanager
def engine_awake_across_rounds(trainer):
    """With vLLM colocate and `vllm_enable_sleep_mode=True`, TRL's `VLLMGeneration.generate` puts the engine to
    sleep at level 2 (weights discarded) after every call, so the next call pushes every weight again. Phase 1's
    rounds all come before the step's optimizer update, so within the block the engine's sleep is put off to the
    block's end, and the wake-ups and weight pushes that would follow it are skipped: a step's rounds cost one weight
    sync and one sleep, as one round does (docs/dynamic_sampling.md, "Rounds under vLLM sleep mode").

    TRL layout: `VLLMGeneration.generate` reads `self.llm.sleep`, `self.llm.wake_up` and `self.sync_weights` as
    instance attributes and keeps `_llm_weights_sleeping` (checked: it must exist).
    Entry: `trl.generation.vllm_generation.VLLMGeneration`."""
    generation = getattr(trainer, "vllm_generation", None) if trainer.use_vllm else None
    if generation is None or generation.mode != "colocate" or not generation.enable_sleep_mode:
        yield
        return
    if not hasattr(generation, "_llm_weights_sleeping"):
        raise RuntimeError(
            "dynamic_sampling: TRL's VLLMGeneration has no `_llm_weights_sleeping`; this TRL version is not supported "
            "with vllm_enable_sleep_mode=True and dynamic sampling. Set vllm_enable_sleep_mode=False."
        )
    llm, sync_weights = generation.llm, generation.sync_weights
    sleep, wake_up = llm.sleep, llm.wake_up
    put_off: list[tuple] = []  # the last sleep call put off

    def sleep_at_the_end(*args, **kwargs):
        put_off[:] = [(args, kwargs)]

    def wake_up_unless_awake(*args, **kwargs):
        if not put_off:
            wake_up(*args, **kwargs)

    def sync_unless_loaded():
        if put_off:  # awake since the last sync, and no optimizer update since
            generation._llm_weights_sleeping = False
            return
        sync_weights()

    try:
        with (
            instance_override(llm, "sleep", sleep_at_the_end),
            instance_override(llm, "wake_up", wake_up_unless_awake),
            instance_override(generation, "sync_weights", sync_unless_loaded),
        ):
            yield
    finally:
        if put_off:
            args, kwargs = put_off[0]
            sleep(*args, **kwargs)
            generation._llm_weights_sleeping = True


# Phase 2: TRL's scoring pass over the trained rows.


def replay_row(row) -> dict:
    """The dataset row handed to TRL's scoring pass: with an environment, its prompt is the one generated from."""
    if row.generation_prompt is None:
        return row.row
    return {**row.row, "prompt": row.generation_prompt}


def first_turn(row) -> tuple[list[int], list[float] | None]:
    """The completion ids and sampling log-probs the rollout hook hands TRL: before the tool loop, with tools."""
    if row.tool_rollout is None:
        return row.completion_ids, row.logprobs
    return row.tool_rollout["first_turn_ids"], row.tool_rollout["first_turn_logprobs"]


@contextmanager
def replaying_generation_and_rewards(trainer, local):
    """For TRL's scoring pass over the kept rows `local` (`sampler.GeneratedRow`s): `rollout_func` hands back their
    recorded completions, `_calculate_rewards` their recorded rewards, gathered as TRL gathers its own, and the
    reward functions' extra logs recorded in phase 1 are queued as TRL queues them.

    TRL layout: `_generate` uses `self.rollout_func(prompts, self)` when set (a dict with prompt_ids, completion_ids,
    logprobs, env_mask and extra keys), its one entry point that accepts ready-made completions, then still decodes
    them and logs the completion metrics; `_calculate_rewards` is read as an instance attribute and returns every
    process's rewards in process order; `_pending_extra_logs` maps a column to its values.
    Entries: `GRPOTrainer._generate`, `GRPOTrainer._calculate_rewards`, `GRPOTrainer.__init__`."""
    local_rewards = torch.tensor([row.rewards for row in local], device=trainer.accelerator.device)
    extra_keys = sorted({key for row in local for key in row.extra})

    def replay_generation(prompts, _trainer):
        turns = [first_turn(row) for row in local]
        output = {
            "prompt_ids": [row.prompt_ids for row in local],
            "completion_ids": [ids for ids, _ in turns],
            "logprobs": None if local[0].logprobs is None else [logprobs for _, logprobs in turns],
        }
        # With tools, TRL's (replayed) tool loop returns the mask; without, a rollout hook's `env_mask` is one.
        if local[0].tool_mask is not None and not trainer.tools:
            output["env_mask"] = [row.tool_mask for row in local]
        for key in extra_keys:
            output[key] = [row.extra.get(key) for row in local]
        return output

    def replay_rewards(inputs, prompts, completions, completion_ids_list):
        # As `GRPOTrainer._calculate_rewards` ends: every process's rewards, in process order.
        return gather(local_rewards)

    for column in sorted({column for row in local for column in row.extra_logs}):
        trainer._pending_extra_logs[column].extend(row.extra_logs.get(column) for row in local)
    with (
        instance_override(trainer, "rollout_func", replay_generation),
        instance_override(trainer, "_calculate_rewards", replay_rewards),
    ):
        yield


@contextmanager
def replaying_tools_and_environments(trainer, local):
    """For TRL's scoring pass over the kept rows `local`: the tool loop returns its recorded result, and no
    environment is drawn or reset.

    TRL layout: `_generate` runs `self._tool_call_loop` (an instance attribute) on what the rollout hook returned
    when `self.tools` is set, and `_generate_and_score_completions` draws and resets environments only when
    `self.environment_factories` is set, from `self.environments`.
    Entries: `GRPOTrainer._tool_call_loop`, `GRPOTrainer.__init__`."""
    rollouts = [row.tool_rollout for row in local]

    def replayed_loop(prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        final_logprobs = None if logprobs is None else [row.logprobs for row in local]
        return (
            [list(row.tool_mask) for row in local],
            copy.deepcopy([rollout["completions"] for rollout in rollouts]),
            [list(row.completion_ids) for row in local],
            final_logprobs,
            sum(rollout["calls"] for rollout in rollouts),
            sum(rollout["failures"] for rollout in rollouts),
            [list(rollout["images"]) for rollout in rollouts],
        )

    tool_loop = instance_override(trainer, "_tool_call_loop", replayed_loop) if trainer.tools else nullcontext()
    with (
        tool_loop,
        instance_override(trainer, "environment_factories", None),
        instance_override(trainer, "environments", None),
    ):
        yield


@contextmanager
def next_logps_call_through(trainer, replacement, active: bool = True):
    """For the block, the trainer's next log-prob call goes to `replacement(current, *args, **kwargs)`, `current`
    being the method it replaces; later calls are the trainer's own. Nothing is replaced when not `active`.

    TRL layout: `_get_per_token_logps_and_entropies` is read as an instance attribute by its callers.
    Entry: `GRPOTrainer._get_per_token_logps_and_entropies`."""
    if not active:
        yield
        return
    current = getattr(trainer, LOGPS_METHOD)

    def first_call(*args, **kwargs):
        setattr(trainer, LOGPS_METHOD, current)
        return replacement(current, *args, **kwargs)

    with instance_override(trainer, LOGPS_METHOD, first_call):
        yield


@contextmanager
def scoring_with_generating_logps(trainer, local, carried_per_process: list[int]):
    """Runs TRL's scoring pass so that carried rows' old log-probs (and, with vLLM, their importance-sampling
    ratio) come from the policy that generated them, recorded, not computed again. Yields a callable that completes
    TRL's output. `carried_per_process` (carried rows each process trains) must be the same on every process.

    TRL layout: where TRL computes old log-probs (`carry.trl_computes_old_logps`), the first log-prob call of
    `_generate_and_score_completions` is the old-policy one, on `self.model` and every row of the batch (checked: it
    fails naming the TRL version otherwise), and the vLLM importance-sampling ratio is derived from its result.
    Entries: `GRPOTrainer._generate_and_score_completions`, `GRPOTrainer._get_per_token_logps_and_entropies`."""
    if not any(carried_per_process):
        yield lambda output: output
        return
    intercept = trl_computes_old_logps(trainer)
    replaced = []

    def old_logps_call(current, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        # TRL's first log-prob call of the scoring pass is the old-policy one; later ones (reference) are TRL's own.
        if model is not trainer.model or input_ids.shape[0] != len(local):
            raise RuntimeError(
                "dynamic_sampling_carry_surplus: TRL's scoring pass did not start with the old-policy log-probs of "
                "the batch; this TRL version is not supported with carrying. Set dynamic_sampling_carry_surplus=False."
            )
        carried = [row.generating_logps is not None for row in local]
        rows = rows_to_score(carried, carried_per_process, kwargs.get("batch_size"))
        logps = scoring_rows_only(current, rows, model, input_ids, attention_mask, logits_to_keep, **kwargs)
        replaced.append(True)
        return place_generating_logps(logps, local), None, None

    def complete(output: dict) -> dict:
        device = output["completion_ids"].device
        output[CARRIED_ROWS_KEY] = torch.tensor([row.generating_logps is not None for row in local], device=device)
        if intercept:
            if not replaced:
                raise RuntimeError(
                    "dynamic_sampling_carry_surplus: TRL's scoring pass computed no old-policy log-probs; this TRL "
                    "version is not supported with carrying. Set dynamic_sampling_carry_surplus=False."
                )
            return output
        # TRL computed none, so its loss uses ratio 1 for every row. Fresh rows keep it (current policy, unchanged
        # until this batch's optimizer step): the loss fills their old log-probs from its own forward
        # (`carried_rows_in_loss`). Carried rows get their generating policy's.
        generating = torch.zeros(output["completion_ids"].shape, dtype=torch.float32, device=device)
        output[GENERATING_LOGPS_KEY] = place_generating_logps(generating, local)
        output["old_per_token_logps"] = output[GENERATING_LOGPS_KEY]
        return output

    with next_logps_call_through(trainer, old_logps_call, active=intercept):
        yield complete


def carried_rows_in_loss(trainer, inputs: dict, record_ratio):
    """Within TRL's `_compute_loss` on a batch from `scoring_with_generating_logps` that holds carried rows, its one
    log-prob forward also (1) where TRL computed no old log-probs, sets `old_per_token_logps`, which TRL reads after
    that forward, to the forward's own detached log-probs for fresh rows (TRL's ratio 1) and the generating ones
    for carried rows; (2) hands `record_ratio(logps, old_logps, mask, carried)` the forward's detached log-probs,
    the old ones, the loss mask and which rows are carried, for the carried rows' ratio metric.

    TRL layout: `_compute_loss`'s first log-prob call is the policy forward, and it reads
    `inputs["old_per_token_logps"]` after that call. Entry: `GRPOTrainer._compute_loss`."""
    carried = inputs.get(CARRIED_ROWS_KEY)

    def loss_logps_call(current, *args, **kwargs):
        logps, entropies, aux = current(*args, **kwargs)
        if GENERATING_LOGPS_KEY in inputs:
            generating = inputs[GENERATING_LOGPS_KEY].to(logps.dtype)
            inputs["old_per_token_logps"] = torch.where(carried.unsqueeze(1), generating, logps.detach())
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        record_ratio(logps.detach(), inputs["old_per_token_logps"], mask, carried)
        return logps, entropies, aux

    return next_logps_call_through(trainer, loss_logps_call, active=carried is not None)


# Every step: the reliability checks.


def reward_funcs_replaced(trainer, reward_funcs: list):
    """`trainer.reward_funcs` is `reward_funcs` for the block (one `_calculate_rewards` call), so that the trainer
    keeps the user's objects everywhere else.

    TRL layout: `_calculate_rewards` reads `self.reward_funcs` (an instance attribute set in `__init__`) at call time
    and calls each in order. Entries: `GRPOTrainer._calculate_rewards`, `GRPOTrainer.__init__`."""
    return instance_override(trainer, "reward_funcs", reward_funcs)


# Reads and calls of the trainer's private names.


def is_vision_language(trainer) -> bool:
    """TRL layout: `_is_vlm`, set in `__init__` from the processing class. Entry: `GRPOTrainer.__init__`."""
    return trainer._is_vlm


def is_zero3(trainer) -> bool:
    """Whether DeepSpeed ZeRO-3 shards the model. TRL layout: `_dist`, the `DistributedBackend` set in `__init__`, and
    its `is_zero3`. Entry: `GRPOTrainer.__init__`."""
    return trainer._dist.is_zero3


def train_metrics(trainer):
    """TRL's training metrics (name -> values), averaged and logged at each logging step; the package appends its own.
    TRL layout: `_metrics["train"]`, a `defaultdict(list)` set in `__init__`. Entry: `GRPOTrainer.__init__`."""
    return trainer._metrics["train"]


def policy_logps(trainer, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[torch.Tensor]:
    """Per-token log-probs of each completion under the current model, one unpadded CPU tensor per row.

    TRL layout: `_tokenizer` (set in `__init__`) pads, and `_get_per_token_logps_and_entropies` (model, input_ids,
    attention_mask, logits_to_keep, batch_size) returns the log-probs first. Entries: `GRPOTrainer.__init__`,
    `GRPOTrainer._get_per_token_logps_and_entropies`."""
    device = trainer.accelerator.device
    pad_id = trainer._tokenizer.pad_token_id
    prompts = [torch.tensor(ids) for ids in prompt_ids]
    completions = [torch.tensor(ids) for ids in completion_ids]

    def side_by_side(value, make=lambda ids: ids):  # prompts padded on the left, completions on the right
        left, right = pad([make(ids) for ids in prompts], value, "left"), pad([make(ids) for ids in completions], value)
        return torch.cat([left, right], dim=1).to(device)

    input_ids, attention_mask = side_by_side(pad_id), side_by_side(0, torch.ones_like)
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            input_ids,
            attention_mask,
            max(len(ids) for ids in completion_ids),
            batch_size=trainer.args.per_device_train_batch_size,
        )
    # Cloned: a view would keep (and pickle, and save) the whole padded batch with each row.
    return [logps[i, : len(ids)].float().cpu().clone() for i, ids in enumerate(completion_ids)]


def checkpoint_folder(trainer, trial) -> str:
    """The folder `_save_checkpoint` writes this step's checkpoint into. Layout (transformers' `Trainer`):
    `<_get_output_dir(trial)>/checkpoint-<global_step>`. Entries: `GRPOTrainer._get_output_dir`,
    `GRPOTrainer._save_checkpoint`."""
    name = f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
    return os.path.join(trainer._get_output_dir(trial=trial), name)
