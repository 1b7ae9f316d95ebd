"""Refill prompts from a streaming training dataset (`datasets.IterableDataset`) for dynamic sampling.

A stream has no length and no random access, so the map-style `RefillSampler` cannot serve it. `StreamRefill`
takes its place with the same interface (`draw`, `state_dict`, `load_state_dict`) plus `row`, which returns a
drawn prompt's row:

- Refill prompts are the next unread rows of the refill reader's own pass over the stream, read in stream order
  (shuffled with a buffer and the seed `seed + pass`, as TRL shuffles the dataloader's stream, when
  `shuffle_dataset=True`). Like `RefillSampler`, the reader is independent of the dataloader, so the step, epoch
  and learning-rate accounting stay `GRPOTrainer`'s; at the end of the stream it starts a new pass.
- A prompt is keyed by a hash of its content (`prompt_key`), since stream rows carry no index; prompt skipping keeps
  its history under that key, in a table of `STREAM_KEY_SPACE` slots (two prompts that share a slot share a history).
- A prompt whose key the step's batch already holds (the dataloader's or an earlier refill's prompt, or rarely
  another prompt in the same slot) is passed over, so no prompt is generated twice in one batch and a key names
  one row of the step.
- Only the main process reads the stream; the rows it drew are broadcast, so every process generates the same
  prompts and takes the same decisions even when the stream is not deterministic. A read that fails is broadcast
  as a failure and raised on every process, so none waits in a collective the others skipped.
- When a whole pass yields no usable prompt (the stream is empty on a new pass, as a one-shot generator is, or
  holds nothing but prompts already in the batch), `draw` returns fewer prompts than asked, the round stops, and
  `dynamic_sampling_on_exhausted` decides as when the rounds run out: fill the batch and train, or raise.
- The checkpoint holds the pass and the position in it; a resumed run reads the stream again up to that
  position, so it continues with the prompt the interrupted run would have read next.
"""

import hashlib
import itertools
import json

from accelerate.utils import broadcast_object_list

# Slots of the hashed prompt keys: 2**20 slots cost 12 MB of skipping history (posterior) or 2 MB (streak).
STREAM_KEY_SPACE = 1 << 20
# Rows `datasets.IterableDataset.shuffle` holds to shuffle the refill pass (its default).
SHUFFLE_BUFFER = 1000


def prompt_text(prompt) -> str:
    """A canonical text of a prompt (a string or chat messages), for duplicate checks and keys."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str, ensure_ascii=False)


def row_prompt(row: dict):
    """What identifies a row's prompt: its `prompt`, or the whole row where an environment supplies the prompt."""
    return row["prompt"] if "prompt" in row else row


def prompt_key(prompt) -> int:
    """A stable key in `[0, STREAM_KEY_SPACE)` for a prompt: the same on every process and in every run."""
    digest = hashlib.blake2b(prompt_text(prompt).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % STREAM_KEY_SPACE


class StreamReader:
    """Reads the rows of an iterable dataset in passes and knows where it stands: `(pass_index, position)`."""

    def __init__(self, dataset, seed: int, shuffle: bool):
        self.dataset, self.seed, self.shuffle = dataset, seed, shuffle
        self.pass_index = 0
        self.position = 0
        # Rows in one complete pass, once a pass has been read to its end.
        self.rows_per_pass: int | None = None
        self._iterator = None

    def _open(self):
        stream = self.dataset
        if self.shuffle and hasattr(stream, "shuffle"):
            stream = stream.shuffle(seed=self.seed + self.pass_index, buffer_size=SHUFFLE_BUFFER)
        self._iterator = itertools.islice(iter(stream), self.position, None)

    def read(self, count: int, taken: set[int]) -> list[dict]:
        """The next `count` rows whose prompt key is not in `taken` (which they are added to). Fewer when a whole
        pass goes by without one."""
        rows, misses = [], 0
        while len(rows) < count:
            if self._iterator is None:
                self._open()
            row = next(self._iterator, None)
            if row is None:
                empty_pass = self.position == 0
                self.rows_per_pass = self.rows_per_pass or self.position
                self.pass_index, self.position, self._iterator = self.pass_index + 1, 0, None
                if empty_pass:
                    break
                continue
            self.position += 1
            key = prompt_key(row_prompt(row))
            if key in taken:
                misses += 1
                if self.rows_per_pass is not None and misses >= self.rows_per_pass:
                    break
                continue
            misses = 0
            taken.add(key)
            rows.append(dict(row))
        return rows

    def state_dict(self) -> dict:
        return {"pass_index": self.pass_index, "position": self.position, "rows_per_pass": self.rows_per_pass}

    def load_state_dict(self, state: dict) -> None:
        self.pass_index, self.position = int(state["pass_index"]), int(state["position"])
        self.rows_per_pass = state.get("rows_per_pass")
        self._iterator = None


class StreamRefill:
    """The refill source of a streaming dataset (see the module docstring). `draw` returns prompt keys, distinct
    within a step (a prompt whose key the step already holds is passed over, so two prompts that share a slot are
    never in one batch); `row` returns the row drawn under a key in the current step."""

    def __init__(self, dataset, seed: int, shuffle: bool, is_main_process: bool):
        self.reader = StreamReader(dataset, seed, shuffle)
        self.is_main_process = is_main_process
        self._taken: set[int] = set()
        self._rows: dict[int, dict] = {}
        # True once a draw came back short because the stream had no usable prompt left.
        self.ran_dry = False

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
                payload[0] = ("rows", self.reader.read(count, self._taken), self.reader.state_dict())
            except Exception as error:  # broadcast, so that every process raises instead of waiting
                payload[0] = ("error", f"{type(error).__name__}: {error}", None)
        broadcast_object_list(payload, from_process=0)
        kind, rows, state = payload[0]
        if kind == "error":
            raise RuntimeError(
                f"dynamic_sampling: reading refill prompts from the streaming train_dataset failed: {rows}"
            )
        keys = [prompt_key(row_prompt(row)) for row in rows]
        if not self.is_main_process:
            self._taken.update(keys)
            self.reader.load_state_dict(state)
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
        return self.reader.rows_per_pass or max(1, self.reader.position)

    def state_dict(self) -> dict:
        return {"stream": self.reader.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "stream" not in state:
            raise ValueError(
                "dynamic_sampling: the checkpoint's refill state is a map-style dataset's, but train_dataset is a "
                "stream; resume with the training dataset the checkpoint was saved with."
            )
        self.reader.load_state_dict(state["stream"])
