"""What dynamic sampling needs from TRL to generate like `GRPOTrainer` and to replay tool calls and environments.

Phase 1 must generate exactly as `GRPOTrainer._generate_and_score_completions` does, which prepares the prompts
before it calls `_generate`: it draws one environment instance per rollout and resets it (`environment_factory`),
appends the observation `reset` returns to the prompt, builds each rollout's tool functions, and puts a row's images
into its messages. `generate_like_trl` runs TRL's own method and stops it right after `_generate` returns, so that
preparation is TRL's, unchanged, and nothing after generation (log-prob passes, rewards) is computed for rounds
whose groups may be dropped. The environment instances stay as `reset` and the tools left them, so the rewards
computed next see each episode once, before any later round resets the instance.

Phase 2 replays the kept rows into TRL's scoring pass. Three things would otherwise happen a second time there:

- tool calls: TRL's `_generate` runs its tool loop on what the rollout hook returns. The replay hands TRL the
  completion as it was before the loop ran and replaces `_tool_call_loop`, for that pass only, by one returning the
  loop's recorded result (final completion ids, tool mask, parsed messages, tool images) and the kept rows' share of
  its tool-call and failure counts, so TRL logs `tools/call_frequency` and `tools/failure_frequency` over the
  trained batch, as `GRPOTrainer` does over its own;
- environment resets: the replay hides the environments from TRL for that pass (no instance is drawn or reset) and
  gives each row the prompt it was generated from, observation included;
- images are not replayed: a kept row carries its own `image`/`images` fields, from which TRL's scoring pass builds
  the image inputs of exactly that row.

TRL counts tool calls per batch, not per rollout. A rollout's share is read off the loop's result: each assistant
message carrying tool calls was executed (and its calls counted) when the loop reached it, i.e. when it is among
the first `max_tool_calling_iterations` assistant messages of the rollout; failures are those calls less the ones
that returned, counted by wrapping this rollout's tool functions.

Everything recorded is plain data (lists, dicts, strings, numbers, images), so a row can move between processes.
"""

import copy
import inspect
from contextlib import contextmanager, nullcontext


class _Generated(Exception):
    """Stops TRL's scoring pass right after generation, carrying what `_generate` got and returned."""

    def __init__(self, prompts, outputs):
        super().__init__("generation done")
        self.prompts, self.outputs = prompts, outputs


_MISSING = object()


@contextmanager
def _instance_override(trainer, name: str, value):
    """Sets `trainer.<name>` on the instance for the block, then restores what was there (a test's wrapper too)."""
    saved = trainer.__dict__.get(name, _MISSING)
    setattr(trainer, name, value)
    try:
        yield
    finally:
        if saved is _MISSING:
            trainer.__dict__.pop(name, None)
        else:
            trainer.__dict__[name] = saved


def generate_like_trl(trainer, trl_generate_and_score, rows: list[dict], around_generate=nullcontext):
    """Runs `trl_generate_and_score(rows)` (GRPOTrainer's method) up to the end of `_generate`, inside
    `around_generate()`, and returns the prompts TRL generated from, `_generate`'s outputs and, with tools, each
    row's `tool_rollout` record."""
    generate = trainer._generate
    tool_records = [None] * len(rows)

    def generate_then_stop(prompts):
        with around_generate(), _recording_tool_loop(trainer, tool_records):
            outputs = generate(prompts)
        raise _Generated(prompts, outputs)

    with _instance_override(trainer, "_generate", generate_then_stop):
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

    with _instance_override(trainer, "_tool_call_loop", recording_loop):
        yield


@contextmanager
def replaying_tools_and_environments(trainer, local):
    """For TRL's scoring pass over the kept rows `local`: the tool loop returns its recorded result, and no
    environment is drawn or reset."""
    with _replayed_tool_loop(trainer, local), _environments_hidden(trainer):
        yield


@contextmanager
def _replayed_tool_loop(trainer, local):
    if not trainer.tools:
        yield
        return
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

    with _instance_override(trainer, "_tool_call_loop", replayed_loop):
        yield


@contextmanager
def _environments_hidden(trainer):
    if trainer.environment_factories is None:
        yield
        return
    factories, environments = trainer.environment_factories, trainer.environments
    trainer.environment_factories, trainer.environments = None, None
    try:
        yield
    finally:
        trainer.environment_factories, trainer.environments = factories, environments


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
