"""Transformers `generate` calls in as few pieces as memory allows.

A generation round reaches TRL's `_generate_single_turn` as one list of rows (`DynamicSampler.round_calls`,
sampler.py). On a GPU a decoding step is bound by memory traffic and kernel launches, not by the number of rows,
so one call of three generation batches costs little more than one of a single batch, where three calls cost three
times as much. The price is memory: a call's KV cache grows with its rows.

Three things size a round's calls, each call holding whole groups (`plan_calls`, `halve_call`, pure functions):

- the memory plan (generation_memory.py): every training call's peak memory is measured, and a round's calls hold
  the most rows the calls measured so far predict to fit in the free memory less a margin, never fewer than one
  generation batch per process (`GRPOTrainer`'s call). Before any call was measured, and on a device without the
  memory readings (CPU, MPS), calls hold one generation batch per process: the call `GRPOTrainer` makes, which fits
  wherever `GRPOTrainer` fits. The first plan (or its absence) is logged once;
- `max_rows_per_generate_call` caps every call from the start;
- an out-of-memory error in a call (`is_out_of_memory`), the last line of defence, halves that call and retries
  each half, after freeing what the failed call held (`clear_device_cache`). Every row is generated, in order. The
  halved size then caps the run's later training calls, as accelerate's `find_executable_batch_size` keeps its
  reduced batch size, so the error costs one aborted call rather than one per round (an error during evaluation
  caps nothing: evaluation batches are not training rounds). That decorator itself is not used: it retries its
  whole function from the start (regenerating the calls that fitted) and ends in a generic error at size zero,
  where a call of one group that does not fit needs a message saying what to change. Checkpoints keep the learned
  cap, so a resumed run does not meet the error again.

On several processes, the processes agree before any of them enters a round's first `generate`: one gather gives
every process the smallest cap of them all and whether every process can cut its inputs by row (`agreed_calls`),
so that under ZeRO-3 or FSDP they make the same calls. After the round's calls, outside ZeRO-3 and FSDP, a second
gather stops every process when one of them failed (`stop_every_process`), with that process's message, instead of
leaving the others waiting in the next collective.

A retry leaves training as it was. TRL 1.16 enters its generation context (`unwrap_model_for_generation`) inside
`_generate_single_turn`, which turns gradient checkpointing off and, under ZeRO-3, removes DeepSpeed's module hooks
before the call, and turns them back on after it with no `try/finally`: an error inside `generate` leaves both off,
and every later loss computation would run without checkpointing (more memory, right after memory ran short).
Everything else that context enters is a `with` (parameter gathering, the generation config override, `no_grad`,
`summon_full_params`) and is undone by the error itself. The two are therefore restored after a failed call, to what
they were before it (`_generation_changes_undone`), rather than halving inside TRL's context: holding that context
across several calls would mean copying `_generate_single_turn`'s body (its padding, multimodal fields and EOS
masking), or entering the context a second time around it, which under ZeRO-3 would gather the parameters twice
and add the hooks back while the outer context still runs without them. The restore looks at the state, not at
where the error came from: only what was on before the call and is off after it is turned back on.

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

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from accelerate.utils import gather, gather_object
from accelerate.utils.memory import clear_device_cache
from transformers.utils import logging
from trl.models.utils import add_hooks
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from . import generation_memory
from .generation_memory import CallMeasurements, CallPeak, DeviceMemory

logger = logging.get_logger(__name__)

CAP_FIELD = "max_rows_per_generate_call"


# Messages of the errors that mean a device ran out of memory: torch's `OutOfMemoryError` ("CUDA out of memory",
# "XPU out of memory", "MPS backend out of memory"), a CUDA kernel's launch ("CUDA error: out of memory"), cuBLAS's
# workspace, and the host allocator's. cuDNN's NOT_SUPPORTED, which accelerate's `should_reduce_batch_size` also
# matches, is not one.
OUT_OF_MEMORY_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "DefaultCPUAllocator: not enough memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says a device (or the host) ran out of memory."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and any(message in str(error) for message in OUT_OF_MEMORY_MESSAGES)
    )


class CallMemory(CallMeasurements):
    """The run's measured generate calls (generation_memory.py), the device's readings, and the latest plan (rows
    per call; `None` without one), which is logged once."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device_memory = DeviceMemory(device)
        self.last_plan: int | None = None
        # Which of the two lines was logged: the absence of a plan (once, and never after a plan), and the first plan.
        self.logged_no_plan = self.logged_plan = False


def agreed_calls(cap: int | None, splittable: bool, device: torch.device) -> tuple[int | None, bool]:
    """The smallest cap of all processes (`None`: none set anywhere) and whether every process can cut its inputs by
    row: one gather of two integers, so that every process makes the same calls and cuts or keeps its inputs alike."""
    gathered = gather(torch.tensor([[cap or 0, int(splittable)]], device=device)).tolist()
    caps = [row[0] for row in gathered if row[0] > 0]
    return min(caps, default=None), all(row[1] for row in gathered)


def stop_every_process(failure: BaseException | None, process: int) -> None:
    """Called by every process after a round's calls: raises on every process when one of them failed (one gather
    of each process's error message), so that none waits alone in the next collective."""
    messages = gather_object([None if failure is None else f"{type(failure).__name__}: {failure}"])
    failed = [(index, message) for index, message in enumerate(messages) if message is not None]
    if failed and failure is None:
        index, message = failed[0]
        raise RuntimeError(f"Generation failed on process {index} (stopping process {process} too): {message}")


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
    rows: int, unit: int, num_generations: int, collectives: bool, splittable: bool, process: int, num_processes: int,
    fields: list[str] = (),
) -> str | None:
    """Why a call of `rows` rows that ran out of memory cannot be halved and retried, or `None` when it can.

    `collectives`: `generate` runs collectives across processes (ZeRO-3 or FSDP on several processes);
    `splittable`: the call's image inputs (`fields`) can be cut by row."""
    largest_half = (rows // unit + 1) // 2 * unit
    if rows <= unit:
        what = f"one group of num_generations={num_generations} completions" if unit > 1 else "one row"
        return (
            f"Generation ran out of memory in a generate call of {rows} rows, {what}: the smallest call there "
            "is. Lower max_completion_length or num_generations, use bf16 or a smaller model, or generate with vLLM."
        )
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
            f"Generation ran out of memory in a generate call of {rows} rows whose image inputs ({list(fields)}) "
            "cannot be cut by row, so the call cannot be split. Make the calls smaller with a smaller generation "
            "batch per process (per_device_train_batch_size * steps_per_generation) or a lower "
            "max_completion_length, or generate with vLLM (use_vllm=True)."
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


class GenerateCalls:
    """Cuts TRL's transformers generation calls as `max_rows_per_generate_call`, the measured-memory plan and
    out-of-memory errors ask, and restores what TRL's generation context left changed after a failed call; see the
    module docstring. Owned by the dynamic sampler, and used with dynamic sampling off too (the trainer's
    `_generate_single_turn` calls `generate_single_turn`)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.memory = CallMemory(trainer.accelerator.device)
        # Rows per call since an out-of-memory error halved a training call: the cap of every later training call.
        self.learned_cap: int | None = None
        # Set for the first turn of a generation round (`planned_round`): its calls are planned before the first.
        self.round_to_plan = False

    @contextmanager
    def planned_round(self):
        """Marks the next `_generate_single_turn` call, a round's first turn on every process, for the memory plan."""
        self.round_to_plan = True
        try:
            yield
        finally:
            self.round_to_plan = False

    def generate_single_turn(
        self, generate, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        """TRL's `_generate_single_turn` (`generate`) in as few calls as the caps allow (see the module docstring)."""
        planning, self.round_to_plan = self.round_to_plan, False
        if self.trainer.use_vllm or self.trainer.use_transformers_continuous_batching:
            return generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        accelerator, num_rows = self.trainer.accelerator, len(prompt_ids)
        unit = call_unit(num_rows, num_generations)
        user_cap = self.trainer.args.max_rows_per_generate_call
        planned = self.round_rows_per_call(prompt_ids, unit) if planning else None
        caps = [cap for cap in (user_cap, planned, self.learned_cap) if cap]
        cap = min(caps, default=None)
        agreeing = planning and accelerator.num_processes > 1
        # Whether the inputs can be cut by row, looked at where a call may be cut.
        looked_at = agreeing or (cap is not None and cap < num_rows)
        per_row_fields = rows_of_fields(multimodal_fields, images, num_rows) if looked_at else None
        splittable = per_row_fields is not None or not looked_at
        collectives = self.has_collectives()
        if agreeing:
            # One gather per round, before any process enters `generate`: every process makes the same calls.
            cap, splittable = agreed_calls(cap, splittable, accelerator.device)
            if self.memory.last_plan is not None:
                self.memory.last_plan = min(self.memory.last_plan, cap)
        if not splittable and user_cap is not None and user_cap < num_rows:
            raise ValueError(
                f"{CAP_FIELD}={user_cap!r} cannot be applied: this model's image inputs "
                f"({sorted(multimodal_fields)}) cannot be cut by row, so a generate call cannot be split; set "
                f"{CAP_FIELD}=None."
            )
        # Without a way to cut the inputs, a plan or a learned cap leaves the call whole, as GRPOTrainer's is.
        pending = plan_calls(num_rows, unit, cap if splittable else None)

        def generate_rows(start, stop):
            nonlocal per_row_fields
            if (start, stop) == (0, num_rows):
                return generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
            if per_row_fields is None:  # the halves of a retried call
                per_row_fields = rows_of_fields(multimodal_fields, images, num_rows)
            return generate(
                prompt_ids[start:stop], images[start:stop] if images is not None else None,
                per_row_fields.rows(start, stop), num_generations, has_tool_images,
            )  # fmt: skip

        try:
            can_cut = lambda: rows_of_fields(multimodal_fields, images, num_rows) is not None  # noqa: E731
            outputs = self.run_calls(pending, generate_rows, prompt_ids, unit, num_generations,
                                           multimodal_fields, can_cut)  # fmt: skip
            failure = None
        except Exception as error:
            outputs, failure = None, error
        if agreeing and not collectives:
            # An error on one process stops every process, with its message (the others would wait for it in the
            # round's next gather). Under ZeRO-3 or FSDP the others are inside the failed call's collectives.
            stop_every_process(failure, accelerator.process_index)
        if failure is not None:
            raise failure
        if len(outputs) == 1:
            return outputs[0]
        completion_ids = [ids for call_ids, _ in outputs for ids in call_ids]
        if any(call_logprobs is None for _, call_logprobs in outputs):
            return completion_ids, None
        return completion_ids, [row for _, call_logprobs in outputs for row in call_logprobs]

    def run_calls(self, pending, generate_rows, prompt_ids, unit, num_generations, multimodal_fields, can_cut):
        """Runs the calls `pending` in order, measuring training calls and halving a call that ran out of memory;
        returns each call's (completion ids, log-probs)."""
        memory, outputs = self.memory, []
        while pending:
            call = pending.pop(0)
            start = memory.device_memory.start() if self.trainer.model.training else None
            try:
                with self.generation_changes_undone():
                    outputs.append(generate_rows(*call))
            except RuntimeError as error:
                if not is_out_of_memory(error):
                    raise
                splittable = call[1] - call[0] > unit and can_cut()
                problem = self.retry_problem(call[1] - call[0], unit, num_generations, splittable, multimodal_fields)
                if problem is not None:
                    raise RuntimeError(f"{problem} The error was: {error}") from error
            else:
                peak = memory.device_memory.peak_since(start)
                if peak is not None:
                    memory.add(CallPeak(call[1] - call[0], self.padded_prompt_tokens(prompt_ids[call[0]:call[1]]),
                                        max((len(ids) for ids in outputs[-1][0]), default=0), peak))  # fmt: skip
                continue
            # Out of the except block, so that the failed call's tensors, which its traceback holds, can be freed.
            clear_device_cache(garbage_collection=True)
            halves = halve_call(call, unit)
            pending[:0] = halves
            fitted = halves[0][1] - halves[0][0]
            if self.trainer.model.training:
                self.learned_cap = min(fitted, self.learned_cap or fitted)
                kept = f"the cap of every later call of this run (set {CAP_FIELD}={fitted} to start there)"
            else:
                kept = "in this evaluation only (training calls keep their size)"
            logger.warning(
                f"Generation ran out of memory in a generate call of {call[1] - call[0]} rows on process "
                f"{self.trainer.accelerator.process_index}; retrying it as calls of at most {fitted} rows, {kept}."
            )
        return outputs

    def padded_prompt_tokens(self, prompt_ids: list[list[int]]) -> int:
        multiple = self.trainer.pad_to_multiple_of or 1
        return -(-max((len(ids) for ids in prompt_ids), default=0) // multiple) * multiple

    def round_rows_per_call(self, prompt_ids: list[list[int]], unit: int) -> int:
        """Rows per call for this round on this process: what the calls measured so far allow in the free memory
        (generation_memory.py), or, with no plan, one generation batch per process (`GRPOTrainer`'s call)."""
        args, memory = self.trainer.args, self.memory
        batch_rows = -(-args.per_device_train_batch_size * args.steps_per_generation // unit) * unit
        prompt_tokens = self.padded_prompt_tokens(prompt_ids)
        free = memory.device_memory.free()
        rows = memory.rows(free, prompt_tokens, self.trainer.max_completion_length, unit, batch_rows)
        memory.last_plan = rows
        if rows is None:
            if not (memory.logged_no_plan or memory.logged_plan):
                memory.logged_no_plan = True
                device = self.trainer.accelerator.device
                why = "no call measured yet" if free is not None else f"no memory reading on {device}"
                logger.info(
                    f"Generation calls: one generation batch per process ({batch_rows} rows, GRPOTrainer's call) "
                    f"until a plan exists ({why})."
                )
            return batch_rows
        if not memory.logged_plan:
            memory.logged_plan = True
            logger.info(
                f"Generation memory plan: calls of at most {rows} rows on process "
                f"{self.trainer.accelerator.process_index}, "
                f"from {len(memory.calls)} measured call(s), {free / 2**30:.1f} GiB free, "
                f"{generation_memory.MEMORY_MARGIN:.0%} of it kept free."
            )
        return rows

    def has_collectives(self) -> bool:
        """Whether `generate` runs collectives across processes (ZeRO-3 or FSDP on several processes)."""
        trainer = self.trainer
        return trainer.accelerator.num_processes > 1 and (trainer._dist.is_zero3 or trainer.is_fsdp_enabled)

    def learned_rows_per_call(self) -> int | None:
        """The smallest cap an out-of-memory error taught any process, for checkpoints (a gather on several
        processes, so every process calls it)."""
        caps = [self.learned_cap]
        if self.trainer.accelerator.num_processes > 1:
            caps = gather_object(caps)
        return min((cap for cap in caps if cap), default=None)

    @contextmanager
    def generation_changes_undone(self):
        """On an error out of a generate call, turns back on what TRL's generation context turned off before the
        call and, having no `try/finally`, left off: gradient checkpointing, and ZeRO-3's DeepSpeed module hooks."""
        unwrapped = self.trainer.accelerator.unwrap_model(self.trainer.model_wrapped)
        checkpointing = unwrapped.is_gradient_checkpointing
        try:
            yield
        except BaseException:
            if checkpointing and not unwrapped.is_gradient_checkpointing:
                unwrapped.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs=self.trainer.args.gradient_checkpointing_kwargs
                )
            if self.trainer._dist.is_zero3 and zero3_hooks_removed(self.trainer.model_wrapped):
                add_hooks(self.trainer.model_wrapped)
            raise

    def retry_problem(
        self, rows: int, unit: int, num_generations: int, splittable: bool, multimodal_fields: dict | None = None
    ) -> str | None:
        accelerator = self.trainer.accelerator
        return retry_problem(
            rows, unit, num_generations, self.has_collectives(), splittable, accelerator.process_index,
            accelerator.num_processes, sorted(multimodal_fields or ()),
        )  # fmt: skip


def zero3_hooks_removed(engine) -> bool:
    """Whether TRL's `remove_hooks` left a ZeRO-3 engine without its module hooks (before the first training step,
    the engine has no optimizer and no hooks to restore)."""
    optimizer = getattr(engine, "optimizer", None)
    offload = getattr(optimizer, "parameter_offload", optimizer)
    return offload is not None and hasattr(offload, "forward_hooks") and not offload.forward_hooks
