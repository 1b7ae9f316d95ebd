"""The dataset index of every training dataloader row, recorded on the sampler's side, so that rows reach TRL (and
`_prepare_inputs`, and reward functions) exactly as the dataset gives them, with no column added.

TRL's train sampler yields the same index stream on every process (it is seeded alike). A dataloader batch of `B`
rows per process takes, over the `N` processes, the next `N * B` indices of that stream, process `p` the `p`-th
slice of `B` (accelerate's `BatchSamplerShard` gives process `p` batches `p, p + N, ...` of the unsharded loader).
`RecordingSampler` keeps the indices it has yielded, first in first out; the trainer takes one batch's worth for
each batch it receives, in order, which prefetching and loader workers do not change (the sampler runs in the
main process, and batches come out in sampler order). A resumed run's skipped batches are drawn from the sampler
but never delivered; the trainer announces them (`skip_batches`) so their indices are dropped too.
"""

from collections import deque
from itertools import islice
from torch.utils.data import Sampler


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

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def skip_batches(self, count: int) -> None:
        """The next pass's first `count` batches are drawn but not delivered (a resumed epoch's trained batches)."""
        self._batches_to_skip = count

    def take_batch(self, rows: int, process_index: int, num_processes: int, delivered=None) -> list[int]:
        """The dataset indices of the next delivered batch of `rows` rows on process `process_index`.

        `delivered(indices)` tells whether this process's batch holds those dataset rows; a batch paired with the
        wrong indices would corrupt the prompt history without a sound, so it is refused. Where the Trainer skipped
        a resumed epoch's batches without announcing them (transformers releases without
        `get_resumed_dataloader`), whole batches are dropped until the recorded ones are those delivered."""
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
        self._drop(self._batches_to_skip * global_rows)
        self._batches_to_skip = 0
        own = slice(process_index * rows, (process_index + 1) * rows)
        while delivered is not None and not delivered(candidate := list(islice(self._recorded, global_rows))[own]):
            if not searching or len(self._recorded) < 2 * global_rows:
                raise RuntimeError(
                    f"dynamic_sampling: the training batch's first row is not row {candidate[0]} of train_dataset, "
                    "whose index the train sampler recorded for it; the training dataloader must deliver batches in "
                    "sampler order."
                )
            self._drop(global_rows)
        batch = [self._recorded.popleft() for _ in range(global_rows)]
        return batch[own]

    def _drop(self, count: int) -> None:
        for _ in range(count):
            self._recorded.popleft()


class BatchRowIndices:
    """One dataloader batch's rows and their dataset indices. Rows are found by identity: they are the very objects
    the dataloader delivered, kept alive here, so no other live object can share their `id`."""

    def __init__(self, rows: list[dict], indices: list[int]):
        self.rows = rows
        self._index_by_id = {id(row): index for row, index in zip(rows, indices, strict=True)}

    def index_of(self, row: dict) -> int:
        """The dataset index of `row`, or -1 for a row that is not one of this batch's."""
        return self._index_by_id.get(id(row), -1)
