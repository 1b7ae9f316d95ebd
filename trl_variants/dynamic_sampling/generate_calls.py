"""Transformers `generate` calls in as few pieces as memory allows; docs/dynamic_sampling.md, "Generation calls and
memory", explains it.

A round reaches TRL's `_generate_single_turn` as one list of rows. On a GPU one call of several generation batches
costs little more than one of a single batch, but its KV cache grows with its rows. So a round's calls hold whole
groups (`plan_calls`), at most the least of `max_rows_per_generate_call`, the measured-memory plan
(generation_memory.py; one generation batch per process, `GRPOTrainer`'s call, before any call was measured or
without memory readings) and the cap an out-of-memory error taught. Such an error (`is_out_of_memory`) halves the
failed call (`halve_call`) and retries each half, the halved size capping later training calls and kept in
checkpoints; where halving is unsafe (ZeRO-3 or FSDP on several processes, inputs that cannot be cut by row, a call
of one group) it raises one line saying what to change (`retry_problem`). On several processes, one gather agrees
on the calls before any `generate` (the smallest cap, and whether every process can cut its inputs) and, outside
ZeRO-3 and FSDP, a second stops every process, with its message, when one failed. After a failed call, what
TRL's generation context turned off without `try/finally` (gradient checkpointing, ZeRO-3's module hooks) is turned
back on (`generation_changes_undone`). vLLM and transformers' continuous batching get every call whole.
"""

import functools
from contextlib import contextmanager

import torch
from accelerate.utils import gather, gather_object
from accelerate.utils.memory import clear_device_cache
from transformers.utils import logging
from trl.models.utils import add_hooks
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from .generation_memory import KEPT_MEASUREMENTS, MEMORY_MARGIN, CallPeak, DeviceMemory, call_rows
from .trl_hooks import is_zero3

logger = logging.get_logger(__name__)

CAP_FIELD = "max_rows_per_generate_call"
# Messages of out-of-memory errors besides torch's `OutOfMemoryError`: a CUDA kernel's launch, cuBLAS's workspace,
# the host allocator (cuDNN's NOT_SUPPORTED, which accelerate's `should_reduce_batch_size` matches, is not one).
OUT_OF_MEMORY_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "DefaultCPUAllocator: not enough memory")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` says a device (or the host) ran out of memory."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and any(message in str(error) for message in OUT_OF_MEMORY_MESSAGES)
    )


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


def retry_problem(rows: int, unit: int, num_generations: int, collectives: bool, splittable: bool, process: int,
                  num_processes: int, fields: list[str] = ()) -> str | None:  # fmt: skip
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
            "Under DeepSpeed ZeRO-3 or FSDP every process must make the same generate calls (their forward passes run "
            f"collectives together), so one process cannot halve its call alone. Set {CAP_FIELD} to at most "
            f"{largest_half} (a multiple of num_generations={num_generations}), which every process applies alike "
            "from the start."
        )
    if not splittable:
        return (
            f"Generation ran out of memory in a generate call of {rows} rows whose image inputs ({list(fields)}) "
            "cannot be cut by row, so the call cannot be split. Make the calls smaller with a smaller generation "
            "batch per process (per_device_train_batch_size * steps_per_generation) or a lower "
            "max_completion_length, or generate with vLLM (use_vllm=True)."
        )
    return None


def rows_of_fields(fields: dict, images: list | None, num_rows: int):
    """A function giving the inputs of rows `start:stop` in the layout TRL's generation path expects (a pixel-values
    tensor cut by TRL's own `split_pixel_values_by_grid`, by image, and merged back by its
    `unsplit_pixel_values_by_grid`), or `None` when some value of `fields` cannot be cut by row."""
    split = fields
    if isinstance(fields.get("pixel_values"), torch.Tensor) and images is not None:
        num_images = [len(row_images) if row_images else 0 for row_images in images]
        split = split_pixel_values_by_grid({**fields, "num_images": num_images})
        split.pop("num_images")
    if any(not hasattr(value, "__len__") or len(value) != num_rows for value in split.values()):
        return None
    merged = {key for key, value in split.items() if isinstance(fields[key], torch.Tensor) and isinstance(value, list)}

    def rows(start: int, stop: int) -> dict:
        selected = {key: value[start:stop] for key, value in split.items()}
        return {**selected, **unsplit_pixel_values_by_grid({key: selected[key] for key in merged})}

    return rows


class GenerateCalls:
    """Cuts TRL's transformers generation calls (see the module docstring). Owned by the dynamic sampler, and used
    with dynamic sampling off too (the trainer's `_generate_single_turn` calls `generate_single_turn`)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.device_memory = DeviceMemory(trainer.accelerator.device)
        self.measured: list[CallPeak] = []  # the latest training calls measured
        self.last_plan: int | None = None  # rows per call of the latest plan (`None`: no plan)
        self.logged: set[str] = set()  # "no plan" is logged once and never after "plan", which is logged once
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
        trainer, num_rows = self.trainer, len(prompt_ids)
        if trainer.use_vllm or trainer.use_transformers_continuous_batching:
            return generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        accelerator, unit = trainer.accelerator, call_unit(num_rows, num_generations)
        user_cap = trainer.args.max_rows_per_generate_call
        planned = self.round_rows_per_call(prompt_ids, unit) if planning else None
        cap = min((cap for cap in (user_cap, planned, self.learned_cap) if cap), default=None)
        agreeing = planning and accelerator.num_processes > 1
        per_row = functools.cache(lambda: rows_of_fields(multimodal_fields, images, num_rows))
        # Whether the inputs can be cut by row, looked at only where a call may be cut.
        splittable = not (agreeing or (cap is not None and cap < num_rows)) or per_row() is not None
        if agreeing:  # one gather per round, before any process enters `generate`: every process makes the same calls
            gathered = gather(torch.tensor([[cap or 0, int(splittable)]], device=accelerator.device)).tolist()
            cap, splittable = min((row[0] for row in gathered if row[0]), default=None), all(row[1] for row in gathered)
            self.last_plan = None if self.last_plan is None else min(self.last_plan, cap)
        if not splittable and user_cap is not None and user_cap < num_rows:
            raise ValueError(
                f"{CAP_FIELD}={user_cap!r} cannot be applied: this model's image inputs ({sorted(multimodal_fields)}) "
                f"cannot be cut by row, so a generate call cannot be split; set {CAP_FIELD}=None."
            )

        def generate_rows(start, stop):
            memory_start = self.device_memory.start() if trainer.model.training else None
            with self.generation_changes_undone():
                if (start, stop) == (0, num_rows):
                    output = generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
                else:
                    call_images = images[start:stop] if images is not None else None
                    output = generate(prompt_ids[start:stop], call_images, per_row()(start, stop), num_generations,
                                      has_tool_images)  # fmt: skip
            peak = self.device_memory.peak_since(memory_start)
            if peak is not None:
                longest = max((len(ids) for ids in output[0]), default=0)
                call = CallPeak(stop - start, self.padded_prompt_tokens(prompt_ids[start:stop]), longest, peak)
                self.measured = [*self.measured, call][-KEPT_MEASUREMENTS:]
            return output

        # Without a way to cut the inputs, a plan or a learned cap leaves the call whole, as GRPOTrainer's is.
        pending, failure = plan_calls(num_rows, unit, cap if splittable else None), None
        try:
            outputs = self.run_calls(pending, generate_rows, unit, num_generations, per_row, multimodal_fields)
        except Exception as error:
            failure = error
        if agreeing and not self.has_collectives():
            # An error on one process stops every process, with its message, so that none waits alone in the round's
            # next gather (under ZeRO-3 or FSDP the others are inside the failed call's collectives).
            messages = gather_object([None if failure is None else f"{type(failure).__name__}: {failure}"])
            failed = next(((index, message) for index, message in enumerate(messages) if message is not None), None)
            if failed is not None and failure is None:
                raise RuntimeError(
                    f"Generation failed on process {failed[0]} (stopping process {accelerator.process_index} too): "
                    f"{failed[1]}"
                )
        if failure is not None:
            raise failure
        if len(outputs) == 1:
            return outputs[0]
        ids, logprobs = zip(*outputs, strict=True)
        logprobs = None if any(rows is None for rows in logprobs) else [row for rows in logprobs for row in rows]
        return [row for rows in ids for row in rows], logprobs

    def run_calls(self, pending, generate_rows, unit, num_generations, per_row, fields):
        """Runs the calls `pending` in order, halving a call that ran out of memory; returns each call's output."""
        accelerator, outputs = self.trainer.accelerator, []
        while pending:
            call = pending.pop(0)
            rows = call[1] - call[0]
            try:
                outputs.append(generate_rows(*call))
                continue
            except RuntimeError as error:
                if not is_out_of_memory(error):
                    raise
                problem = retry_problem(
                    rows, unit, num_generations, self.has_collectives(), rows > unit and per_row() is not None,
                    accelerator.process_index, accelerator.num_processes, sorted(fields or ()),
                )  # fmt: skip
                if problem is not None:
                    raise RuntimeError(f"{problem} The error was: {error}") from error
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
                f"Generation ran out of memory in a generate call of {rows} rows on process "
                f"{accelerator.process_index}; retrying it as calls of at most {fitted} rows, {kept}."
            )
        return outputs

    def padded_prompt_tokens(self, prompt_ids: list[list[int]]) -> int:
        multiple = self.trainer.pad_to_multiple_of or 1
        return -(-max((len(ids) for ids in prompt_ids), default=0) // multiple) * multiple

    def round_rows_per_call(self, prompt_ids: list[list[int]], unit: int) -> int:
        """Rows per call for this round on this process: what the calls measured so far allow in the free memory
        (generation_memory.py), or, with no plan, one generation batch per process (`GRPOTrainer`'s call)."""
        trainer, args = self.trainer, self.trainer.args
        batch_rows = -(-args.per_device_train_batch_size * args.steps_per_generation // unit) * unit
        free = self.device_memory.free()
        rows = call_rows(self.measured, free, self.padded_prompt_tokens(prompt_ids), trainer.max_completion_length,
                         unit, batch_rows)  # fmt: skip
        self.last_plan = rows
        if rows is None and not self.logged:
            why = "no call measured yet" if free is not None else f"no memory reading on {trainer.accelerator.device}"
            logger.info(
                f"Generation calls: one generation batch per process ({batch_rows} rows, GRPOTrainer's call) "
                f"until a plan exists ({why})."
            )
        elif rows is not None and "plan" not in self.logged:
            logger.info(
                f"Generation memory plan: calls of at most {rows} rows on process {trainer.accelerator.process_index}, "
                f"from {len(self.measured)} measured call(s), {free / 2**30:.1f} GiB free, "
                f"{MEMORY_MARGIN:.0%} of it kept free."
            )
        self.logged.add("no plan" if rows is None else "plan")
        return batch_rows if rows is None else rows

    def has_collectives(self) -> bool:
        """Whether `generate` runs collectives across processes (ZeRO-3 or FSDP on several processes)."""
        trainer = self.trainer
        return trainer.accelerator.num_processes > 1 and (is_zero3(trainer) or trainer.is_fsdp_enabled)

    def learned_rows_per_call(self) -> int | None:
        """The smallest cap an out-of-memory error taught any process, for checkpoints (a gather on several
        processes, so every process calls it)."""
        caps = gather_object([self.learned_cap]) if self.trainer.accelerator.num_processes > 1 else [self.learned_cap]
        return min((cap for cap in caps if cap), default=None)

    @contextmanager
    def generation_changes_undone(self):
        """On an error out of a generate call, turns back on what TRL's generation context turned off before the
        call and, having no `try/finally`, left off: gradient checkpointing, and ZeRO-3's DeepSpeed module hooks."""
        engine = self.trainer.model_wrapped
        unwrapped = self.trainer.accelerator.unwrap_model(engine)
        checkpointing = unwrapped.is_gradient_checkpointing
        try:
            yield
        except BaseException:
            if checkpointing and not unwrapped.is_gradient_checkpointing:
                unwrapped.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs=self.trainer.args.gradient_checkpointing_kwargs
                )
            optimizer = getattr(engine, "optimizer", None)  # none before the first training step: no hooks to restore
            offload = getattr(optimizer, "parameter_offload", optimizer)
            if is_zero3(self.trainer) and not getattr(offload, "forward_hooks", True):
                add_hooks(engine)  # TRL's `remove_hooks` left the ZeRO-3 engine without its module hooks
            raise
