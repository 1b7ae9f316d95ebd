"""Where a step's prompts come from, and how each is named, for dynamic sampling (docs/dynamic_sampling.md, "The
refill sampler", "Streaming datasets" and "What crosses processes").

Refill prompts come from a source of their own, independent of the trainer's dataloader (so the step, epoch and
learning-rate accounting stay `GRPOTrainer`'s) and identical on every process: `RefillSampler` for a map-style
dataset, `StreamRefill` for a `datasets.IterableDataset`, whose prompts are keyed by a hash of their content
(`prompt_key`) and read by the main process only, then broadcast. `DatasetIndices` names dataloader rows by dataset
index (a stream's by prompt key) when another process may have to generate them (prompt skipping), recording the indices on the sampler's side so that no column is added to the rows.
"""

import hashlib
import json
from collections import deque
from dataclasses import dataclass, field
from itertools import islice

import torch
from accelerate.data_loader import DataLoaderDispatcher
from accelerate.utils import broadcast_object_list
from torch.utils.data import Sampler


@dataclass
class RefillSampler:
    """Draws dataset indices for refill rounds: a fresh seeded permutation each pass over the dataset."""

    dataset_size: int
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self):
        if self.dataset_size < 1:
            raise ValueError(f"RefillSampler: dataset_size must be >= 1, got {self.dataset_size}.")

    def draw(self, count: int) -> list[int]:
        drawn = []
        while len(drawn) < count:
            if self.position >= self.dataset_size:
                self.epoch, self.position, self._order = self.epoch + 1, 0, []
            if not self._order:
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
                self._order = torch.randperm(self.dataset_size, generator=generator).tolist()
            take = min(count - len(drawn), self.dataset_size - self.position)
            drawn.extend(self._order[self.position : self.position + take])
            self.position += take
        return drawn

    def state_dict(self) -> dict[str, int]:
        return {"dataset_size": self.dataset_size, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if "dataset_size" not in state:
            raise ValueError(
                "RefillSampler: the checkpoint's refill state is a streaming dataset's, but train_dataset is map-style; "
                "resume with the training dataset the checkpoint was saved with."
            )
        if state["dataset_size"] != self.dataset_size:
            raise ValueError(
                f"RefillSampler: the checkpoint's dataset has {state['dataset_size']} rows, this one has "
                f"{self.dataset_size}; resume with the same training dataset."
            )
        self.seed, self.epoch, self.position, self._order = state["seed"], state["epoch"], state["position"], []


# Slots of the hashed prompt keys: 2**20 slots cost 12 MB of skipping history (posterior) or 2 MB (streak).
STREAM_KEY_SPACE = 1 << 20
# Rows `datasets.IterableDataset.shuffle` holds to shuffle the refill pass (its default).
SHUFFLE_BUFFER = 1000


def prompt_key(prompt) -> int:
    """A stable key in `[0, STREAM_KEY_SPACE)` for a prompt (of a row: `row.get("prompt", row)`, the whole row where
    an environment supplies the prompt): the same on every process and in every run."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str, ensure_ascii=False)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % STREAM_KEY_SPACE


class StreamRefill:
    """The refill source of a streaming dataset, read in passes (see the module docstring). `draw` returns prompt
    keys, distinct within a step (a prompt whose key the step already holds is passed over, so two prompts that share
    a slot are never in one batch); `row` returns the row drawn under a key in the current step."""

    def __init__(self, dataset, seed: int, shuffle: bool, is_main_process: bool):
        self.dataset, self.seed, self.shuffle, self.is_main_process = dataset, seed, shuffle, is_main_process
        self.pass_index, self.position, self._iterator = 0, 0, None
        # Rows in one complete pass, once a pass has been read to its end.
        self.rows_per_pass: int | None = None
        self._taken: set[int] = set()
        self._rows: dict[int, dict] = {}
        # True once a draw came back short because the stream had no usable prompt left.
        self.ran_dry = False

    def read(self, count: int, taken: set[int]) -> list[dict]:
        """The next `count` rows whose prompt key is not in `taken` (which they are added to). Fewer when a whole
        pass goes by without one."""
        rows, misses = [], 0
        while len(rows) < count:
            if self._iterator is None:
                stream = self.dataset
                if self.shuffle and hasattr(stream, "shuffle"):
                    stream = stream.shuffle(seed=self.seed + self.pass_index, buffer_size=SHUFFLE_BUFFER)
                self._iterator = islice(iter(stream), self.position, None)
            row = next(self._iterator, None)
            if row is None:
                empty_pass = self.position == 0
                self.rows_per_pass = self.rows_per_pass or self.position
                self.pass_index, self.position, self._iterator = self.pass_index + 1, 0, None
                if empty_pass:
                    break
                continue
            self.position += 1
            key = prompt_key(row.get("prompt", row))
            if key in taken:
                misses += 1
                if self.rows_per_pass is not None and misses >= self.rows_per_pass:
                    break
                continue
            misses = 0
            taken.add(key)
            rows.append(dict(row))
        return rows

    def begin_step(self, keys: list[int], rows: list[dict] | None = None) -> None:
        """Starts a step whose batch already holds the prompts `keys` (the dataloader's), with their `rows` where
        other processes may need to read them."""
        self._taken = set(keys)
        self._rows = dict(zip(keys, rows, strict=True)) if rows is not None else {}
        self.ran_dry = False

    def draw(self, count: int) -> list[int]:
        payload = [None]
        if self.is_main_process:
            try:
                payload[0] = ("rows", self.read(count, self._taken), self.state_dict())
            except Exception as error:  # broadcast, so that every process raises instead of waiting
                payload[0] = ("error", f"{type(error).__name__}: {error}", None)
        broadcast_object_list(payload, from_process=0)
        kind, rows, state = payload[0]
        if kind == "error":
            raise RuntimeError(
                f"dynamic_sampling: reading refill prompts from the streaming train_dataset failed: {rows}"
            )
        keys = [prompt_key(row.get("prompt", row)) for row in rows]
        if not self.is_main_process:
            self._taken.update(keys)
            self.load_state_dict(state)
        self.ran_dry = self.ran_dry or len(rows) < count
        self._rows.update(zip(keys, rows, strict=True))
        return keys

    def row(self, key: int) -> dict:
        """A copy of the row drawn under `key` in this step."""
        if key not in self._rows:
            raise KeyError(f"StreamRefill: no prompt was drawn under key {key} in this step.")
        return dict(self._rows[key])

    @property
    def rows_read(self) -> int:
        """Rows of one pass, or the rows read so far while the first pass is not complete."""
        return self.rows_per_pass or max(1, self.position)

    def state_dict(self) -> dict:
        position = {"pass_index": self.pass_index, "position": self.position, "rows_per_pass": self.rows_per_pass}
        return {"stream": position}

    def load_state_dict(self, state: dict) -> None:
        if "stream" not in state:
            raise ValueError(
                "dynamic_sampling: the checkpoint's refill state is a map-style dataset's, but train_dataset is a "
                "stream; resume with the training dataset the checkpoint was saved with."
            )
        stream = state["stream"]
        self.pass_index, self.position = int(stream["pass_index"]), int(stream["position"])
        self.rows_per_pass, self._iterator = stream.get("rows_per_pass"), None


class RecordingSampler(Sampler):
    """Yields what `sampler` yields and records it. Every other attribute is the wrapped sampler's: accelerate reads
    its `generator` to keep processes in step, the Trainer calls its `set_epoch`."""

    def __init__(self, sampler: Sampler):
        self.sampler = sampler
        self._recorded: deque[int] = deque()
        self._batches_to_skip = 0

    def __iter__(self):
        # A new pass: whatever an earlier pass drew but never delivered belongs to no batch of this one.
        self._recorded.clear()
        for index in self.sampler:
            self._recorded.append(int(index))
            yield index

    def __len__(self) -> int:
        return len(self.sampler)

    def __getattr__(self, name: str):
        if name == "sampler":  # not yet set (during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def set_epoch(self, epoch: int) -> None:  # always present, as accelerate's `set_epoch` looks for it
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def skip_batches(self, count: int) -> None:
        """The next pass's first `count` batches are drawn but not delivered (a resumed epoch's trained batches)."""
        self._batches_to_skip = count

    def take_batch(self, rows: int, process_index: int, num_processes: int, delivered=None) -> list[int]:
        """The dataset indices of the next delivered batch of `rows` rows on process `process_index`. A batch that
        `delivered(indices)` says does not hold those rows is refused, except that where the Trainer skipped a resumed
        epoch's batches unannounced (transformers without `get_resumed_dataloader`), whole batches are dropped until
        the recorded ones are those delivered."""
        global_rows = rows * num_processes
        needed = (self._batches_to_skip + 1) * global_rows
        if len(self._recorded) < needed:
            raise RuntimeError(
                f"dynamic_sampling: a training batch of {rows} rows arrived, but the train sampler recorded only "
                f"{len(self._recorded)} of the {needed} indices it needs; the training dataloader must be the "
                "trainer's own get_train_dataloader, with accelerate's default batch sharding (dispatch_batches "
                "off)."
            )
        searching = not self._batches_to_skip
        for _ in range(self._batches_to_skip * global_rows):
            self._recorded.popleft()
        self._batches_to_skip = 0
        own = slice(process_index * rows, (process_index + 1) * rows)
        while delivered is not None and not delivered(candidate := list(islice(self._recorded, global_rows))[own]):
            if not searching or len(self._recorded) < 2 * global_rows:
                raise RuntimeError(
                    f"dynamic_sampling: the training batch's first row is not row {candidate[0]} of train_dataset, "
                    "whose index the train sampler recorded for it; the training dataloader must deliver batches in "
                    "sampler order."
                )
            for _ in range(global_rows):
                self._recorded.popleft()
        return [self._recorded.popleft() for _ in range(global_rows)][own]


class DatasetIndices:
    """Names the training dataloader's rows by dataset index (a stream's prompt key), so that any process can
    generate any of them. The trainer's `_get_dataloader`, `get_resumed_dataloader` and `_prepare_inputs` call
    `wrap_sampler`, `skip_batches` and `pair_batch`; `key` names a row. `reason` says why rows are named (for error
    messages); with `None` every method leaves the dataloader alone."""

    def __init__(self, reason: str | None, streaming: bool, train_dataset):
        self.reason, self.streaming, self.train_dataset = reason, streaming, train_dataset
        self.recording: RecordingSampler | None = None
        # The latest batch's rows, found by identity: kept alive here, so no other live object can share their `id`.
        self.batch_rows: list[dict] = []
        self.index_by_id: dict[int, int] = {}

    def wrap_sampler(self, sampler_fn, args):
        """The training dataloader's `sampler_fn`, recording what it yields when rows are named by index."""
        if self.reason is None or self.streaming or sampler_fn is None:
            return sampler_fn
        if args.dataloader_num_workers > 0 and not args.dataloader_in_order:
            raise ValueError(
                "dataloader_in_order=False lets loader workers deliver batches out of sampler order, but "
                f"{self.reason} pairs each batch with the dataset indices the sampler drew, in order; set "
                "dataloader_in_order=True or dataloader_num_workers=0."
            )

        def recording_sampler_fn(dataset):
            self.recording = RecordingSampler(sampler_fn(dataset))
            return self.recording

        return recording_sampler_fn

    def check_dataloader(self, dataloader) -> None:
        if self.recording is not None and isinstance(dataloader, DataLoaderDispatcher):
            raise ValueError(
                f"{self.reason} needs each process to draw its own training batches (accelerate's default); "
                "with dispatch_batches=True only the main process draws them. Leave "
                "accelerator_config.dispatch_batches unset."
            )

    def skip_batches(self, num_batches: int) -> None:
        # The skipped batches are drawn from the sampler but never delivered; their indices are dropped with them.
        if self.recording is not None:
            self.recording.skip_batches(num_batches)

    def pair_batch(self, generation_batch: list[dict], process_index: int, num_processes: int) -> None:
        """Pairs a training generation batch with the dataset indices its sampler drew."""
        if self.recording is None:
            return
        first = generation_batch[0]  # one row read per batch checks the pairing
        indices = self.recording.take_batch(
            len(generation_batch), process_index, num_processes,
            delivered=lambda drawn: "prompt" not in first or self.train_dataset[drawn[0]]["prompt"] == first["prompt"],
        )  # fmt: skip
        self.batch_rows = generation_batch
        self.index_by_id = {id(row): index for row, index in zip(generation_batch, indices, strict=True)}

    def key(self, row: dict) -> int:
        """A dataloader row's key: its dataset index, or its prompt's hash on a stream (-1: none)."""
        if self.streaming:
            return prompt_key(row.get("prompt", row))
        return self.index_by_id.get(id(row), -1)
