"""Transformers `generate` calls in as few pieces as memory allows.

A generation round reaches TRL's `_generate_single_turn` as one list of rows (`rounds.GenerationRoundsMixin
._round_calls`), and by default goes to the model's `generate` in one call. On a GPU a decoding step is bound by
memory traffic and kernel launches, not by the number of rows, so one call of three generation batches costs little
more than one of a single batch, where three calls cost three times as much. The price is memory: a call's KV cache
grows with its rows.

Two things cut a call into smaller ones, each holding whole groups (`plan_calls`, `halve_call`, pure functions):

- `max_rows_per_generate_call` caps every call from the start;
- an out-of-memory error in a call (as accelerate's `should_reduce_batch_size` recognizes one) halves that call and
  retries each half, after freeing what the failed call held (`clear_device_cache`). Every row is generated, in
  order. The halved size then caps the run's later calls, as accelerate's `find_executable_batch_size` keeps its
  reduced batch size, so the error costs one aborted call rather than one per round. That decorator itself is not
  used: it retries its whole function from the start (regenerating the calls that fitted) and ends in a generic
  error at size zero, where a call of one group that does not fit needs a message saying what to change.

A call is halved only where that is safe (`retry_problem`). Under DeepSpeed ZeRO-3 or FSDP on several processes,
every process must make the same `generate` calls: their forward passes gather parameters and synchronise
finished sequences collectively, and a process that left a call to retry it alone would pair its collectives with
the others' mid-call ones. The processes cannot agree on a split after the error either, because the others are
then blocked inside that call. There the error is raised with the cap to set, which every process applies alike
from the start. Plain data parallelism (or one process) has no collective inside `generate`, so each process halves
its own calls.

Random stream: `generate` samples from torch's global generator, and which numbers a row draws depends on the
shape of the call it is in. Calls of other sizes (a cap, or the halves of a retry) therefore sample other, equally
valid completions for the same prompts. A real out-of-memory error strikes part-way through a call, after the
sampler drew numbers for the steps done, so the retry starts from a different generator state: the completions of
that call and the random stream of everything after it differ from a run that never hit the error. The call's
prompts do not change; later rounds' can, since round sizes and prompt skipping follow the rewards of the
completions. An error raised before a call draws anything, as the tests simulate, gives exactly the run with the
halved size set as cap.

vLLM and transformers' continuous batching schedule their own batches and get every call whole.
"""

from dataclasses import dataclass

import torch
from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.utils import logging
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

logger = logging.get_logger(__name__)

CAP_FIELD = "max_rows_per_generate_call"


def call_unit(num_rows: int, num_generations: int) -> int:
    """The rows a call is cut in: whole groups when the rows are groups, else single rows (TRL's tool loop
    generates follow-up turns of single rows)."""
    return num_generations if num_generations > 0 and num_rows % num_generations == 0 else 1


def plan_calls(num_rows: int, unit: int, max_rows: int | None) -> list[tuple[int, int]]:
    """`(start, stop)` of consecutive calls covering `num_rows` rows: one call when `max_rows` is `None`, otherwise
    calls of the most whole units that fit in `max_rows` (at least one unit), the last one possibly shorter."""
    if unit < 1 or num_rows < 0 or num_rows % unit:
        raise ValueError(f"plan_calls: num_rows ({num_rows}) must be a non-negative multiple of unit ({unit}).")
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"plan_calls: max_rows must be >= 1 or None, got {max_rows}.")
    if num_rows == 0:
        return []
    per_call = num_rows if max_rows is None else max(unit, max_rows // unit * unit)
    return [(start, min(start + per_call, num_rows)) for start in range(0, num_rows, per_call)]


def halve_call(call: tuple[int, int], unit: int) -> list[tuple[int, int]] | None:
    """The two halves of `call` in whole units (the first one the larger), or `None` for a call of one unit."""
    start, stop = call
    units = (stop - start) // unit
    if units < 2:
        return None
    middle = start + (units + 1) // 2 * unit
    return [(start, middle), (middle, stop)]


def retry_problem(
    rows: int, unit: int, num_generations: int, collectives: bool, splittable: bool, process: int, num_processes: int
) -> str | None:
    """Why a call of `rows` rows that ran out of memory cannot be halved and retried, or `None` when it can.

    `collectives`: `generate` runs collectives across processes (ZeRO-3 or FSDP on several processes);
    `splittable`: the call's image inputs can be cut by row."""
    largest_half = (rows // unit + 1) // 2 * unit
    if collectives:
        return (
            f"Generation ran out of memory in a generate call of {rows} rows on process {process} of {num_processes}. "
            "Under DeepSpeed ZeRO-3 or FSDP every process must make the same generate calls (their forward passes "
            "run collectives together), so one process cannot halve its call alone. Set "
            f"{CAP_FIELD} to at most {largest_half} (a multiple of num_generations={num_generations}), which every "
            "process applies alike from the start."
        )
    if not splittable:
        return (
            f"Generation ran out of memory in a generate call of {rows} rows whose image inputs cannot be cut by "
            f"row, so the call cannot be halved. Set {CAP_FIELD} to at most {largest_half}, or lower "
            "the generation batch."
        )
    if rows <= unit:
        what = f"one group of num_generations={num_generations} completions" if unit > 1 else "one row"
        return (
            f"Generation ran out of memory in a generate call of {rows} rows, {what}: the smallest call there "
            "is. Lower max_completion_length or num_generations, use bf16 or a smaller model, or generate with vLLM."
        )
    return None


@dataclass
class RowFields:
    """TRL's multimodal generation inputs with every value holding one entry per row. `split_keys`: the values
    TRL's `split_pixel_values_by_grid` turned from one tensor into per-row tensors, merged back by its
    `unsplit_pixel_values_by_grid`."""

    per_row: dict
    split_keys: frozenset = frozenset()

    def rows(self, start: int, stop: int) -> dict:
        """The inputs of rows `start:stop`, in the layout TRL's generation path expects."""
        selected = {key: value[start:stop] for key, value in self.per_row.items()}
        return {**selected, **unsplit_pixel_values_by_grid({key: selected[key] for key in self.split_keys})}


def rows_of_fields(fields: dict, images: list | None, num_rows: int) -> RowFields | None:
    """`fields` cut into one entry per row (a pixel-values tensor by TRL's own split, by image), or `None` when
    some value cannot be cut by row."""
    if isinstance(fields.get("pixel_values"), torch.Tensor) and images is not None:
        num_images = [len(row_images) if row_images else 0 for row_images in images]
        split = split_pixel_values_by_grid({**fields, "num_images": num_images})
        split.pop("num_images")
    else:
        split = fields
    if any(not hasattr(value, "__len__") or len(value) != num_rows for value in split.values()):
        return None
    changed = {key for key, value in split.items() if isinstance(fields[key], torch.Tensor) and isinstance(value, list)}
    return RowFields(split, frozenset(changed))


class GenerateCallsMixin:
    """Cuts TRL's transformers generation calls as `max_rows_per_generate_call` and out-of-memory errors ask; see
    the module docstring."""

    # Rows per call since an out-of-memory error halved one: the cap of every later call.
    _rows_per_call_after_oom: int | None = None

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        generate = super()._generate_single_turn
        if self.use_vllm or self.use_transformers_continuous_batching:
            return generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        num_rows = len(prompt_ids)
        unit = call_unit(num_rows, num_generations)
        caps = [cap for cap in (self.args.max_rows_per_generate_call, self._rows_per_call_after_oom) if cap]
        pending = plan_calls(num_rows, unit, min(caps, default=None))
        per_row_fields = rows_of_fields(multimodal_fields, images, num_rows)
        if len(pending) > 1 and per_row_fields is None:
            raise ValueError(
                f"{CAP_FIELD}={self.args.max_rows_per_generate_call!r} cannot be applied: this model's image inputs "
                f"({sorted(multimodal_fields)}) cannot be cut by row, so a generate call cannot be split; set "
                f"{CAP_FIELD}=None."
            )

        def generate_rows(start, stop):
            if (start, stop) == (0, num_rows):
                return generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
            return generate(
                prompt_ids[start:stop], images[start:stop] if images is not None else None,
                per_row_fields.rows(start, stop), num_generations, has_tool_images,
            )  # fmt: skip

        outputs = []  # (completion ids, log-probs) of each call, in row order
        while pending:
            call = pending.pop(0)
            try:
                outputs.append(generate_rows(*call))
                continue
            except RuntimeError as error:
                if not should_reduce_batch_size(error):
                    raise
                problem = self._retry_problem(call[1] - call[0], unit, num_generations, per_row_fields is not None)
                if problem is not None:
                    raise RuntimeError(f"{problem} The error was: {error}") from error
            # Out of the except block, so that the failed call's tensors, which its traceback holds, can be freed.
            clear_device_cache(garbage_collection=True)
            halves = halve_call(call, unit)
            pending[:0] = halves
            fitted = halves[0][1] - halves[0][0]
            self._rows_per_call_after_oom = min(fitted, self._rows_per_call_after_oom or fitted)
            logger.warning(
                f"Generation ran out of memory in a generate call of {call[1] - call[0]} rows on process "
                f"{self.accelerator.process_index}; retrying it as calls of at most {fitted} rows, the cap of every "
                f"later call of this run (set {CAP_FIELD}={fitted} to start there)."
            )
        if len(outputs) == 1:
            return outputs[0]
        completion_ids = [ids for call_ids, _ in outputs for ids in call_ids]
        if any(call_logprobs is None for _, call_logprobs in outputs):
            return completion_ids, None
        return completion_ids, [row for _, call_logprobs in outputs for row in call_logprobs]

    def _retry_problem(self, rows: int, unit: int, num_generations: int, splittable: bool) -> str | None:
        accelerator = self.accelerator
        collectives = accelerator.num_processes > 1 and (is_deepspeed_zero3_enabled() or self.is_fsdp_enabled)
        return retry_problem(
            rows, unit, num_generations, collectives, splittable, accelerator.process_index, accelerator.num_processes
        )
