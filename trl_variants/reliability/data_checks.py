"""Checks on the datasets at trainer construction, and the train samplers that replace TRL's.

Without the checks, TRL accepts a dataset without a `prompt` column, or a reward function whose column is missing,
and fails at the first step with a bare `KeyError` or `TypeError`; and an empty dataset, or one with fewer prompts
than one generation batch, trains for zero steps without an error (TRL's `RepeatSampler` drops incomplete batches).
The samplers cycle such a small dataset, and let a resumed run draw the prompts an uninterrupted run would.
"""

import torch
from torch import nn
from trl.trainer.utils import RepeatSampler

from ..rewards.registry import required_reward_columns

PROMPT_COLUMN = "prompt"


def dataset_problems(dataset, dataset_name: str, reward_funcs: list, reward_func_names: list[str]) -> list[str]:
    """Problems that would stop training on `dataset` at its first batch, as messages naming what to change.

    Column checks are skipped when the column names are unknown (an `IterableDataset` without features); the size
    check needs a dataset with a length.
    """
    problems = []
    columns = getattr(dataset, "column_names", None)
    if hasattr(dataset, "__len__") and len(dataset) == 0:
        problems.append(
            f"{dataset_name} is empty (0 rows); it needs at least one prompt. Check the split you loaded and any "
            "filter applied to it."
        )
    if columns is None:
        return problems
    if PROMPT_COLUMN not in columns:
        problems.append(
            f"{dataset_name} has no '{PROMPT_COLUMN}' column (its columns are {sorted(columns)}); the trainer "
            f"generates completions for the prompts in that column. Rename your prompt column, e.g. "
            f"dataset.rename_column('question', '{PROMPT_COLUMN}')."
        )
    else:
        problems += prompt_type_problems(dataset, dataset_name)
    for reward_func, name in zip(reward_funcs, reward_func_names, strict=True):
        if isinstance(reward_func, nn.Module):
            continue
        missing = [column for column in required_reward_columns(reward_func) if column not in columns]
        if missing:
            problems.append(
                f"Reward function '{name}' needs the column(s) {missing}, which {dataset_name} lacks (its columns "
                f"are {sorted(columns)}). Add the column(s) to the dataset, or give the parameter(s) a default in "
                "the reward function."
            )
    return problems


PROMPT_EXPECTED = "text (str) or a conversation (a list of {'role': ..., 'content': ...} messages)"


def prompt_type_problems(dataset, dataset_name: str) -> list[str]:
    """The prompt column must hold text or conversations; anything else fails inside the tokenizer or the chat
    template with a message that names neither the column nor the dataset. The column's declared type covers
    every row; without one, the first row is checked."""
    features = getattr(dataset, "features", None)
    feature = features.get(PROMPT_COLUMN) if features else None
    dtype = getattr(feature, "dtype", None)
    if dtype is not None and dtype not in ("string", "large_string"):
        return [
            f"{dataset_name} column '{PROMPT_COLUMN}' holds values of type {dtype}; expected {PROMPT_EXPECTED}. "
            "Convert the column, e.g. dataset.map(lambda row: {'prompt': str(row['prompt'])})."
        ]
    row = first_row(dataset)
    if row is None:
        return []
    value = row[PROMPT_COLUMN]
    if isinstance(value, str) or _is_conversation(value):
        return []
    return [
        f"{dataset_name} column '{PROMPT_COLUMN}' holds a {type(value).__name__} in its first row ({value!r:.60}); "
        f"expected {PROMPT_EXPECTED}."
    ]


def _is_conversation(value) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(message, dict) and {"role", "content"} <= set(message) for message in value)
    )


def first_row(dataset):
    if hasattr(dataset, "__len__"):
        return dataset[0] if len(dataset) > 0 else None
    return next(iter(dataset.take(1)), None) if hasattr(dataset, "take") else None


class ResumableRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler`, with a `set_epoch` that makes a resumed run draw the prompts an uninterrupted one would.

    TRL's sampler draws one permutation per epoch from a generator seeded once. A resumed run builds a new sampler,
    so from its second epoch on it would replay the first epoch's order. The Trainer calls `set_epoch` before each
    epoch; it rewinds the generator to the seed and draws the permutations of the earlier epochs again, which gives
    TRL's own order exactly. In an uninterrupted run the generator is already there and nothing is redrawn.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.permutations_drawn = 0

    def set_epoch(self, epoch: int) -> None:
        if not self.shuffle or self.seed is None or self.permutations_drawn == epoch:
            return
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.num_samples, generator=self.generator)
        self.permutations_drawn = epoch

    def __iter__(self):
        # TRL's `__iter__` draws exactly one permutation, when iteration starts.
        self.permutations_drawn += 1
        yield from super().__iter__()


class CyclingRepeatSampler(ResumableRepeatSampler):
    """TRL's `RepeatSampler` layout for a dataset with fewer prompts than one generation batch.

    Each generation batch holds every prompt at least once: a fresh permutation of the dataset is repeated until
    the batch's `batch_size` prompts are filled, so prompts appear `batch_size // len(dataset)` or one more times,
    each occurrence as its own group of `mini_repeat_count` completions. One such batch makes an epoch. The order
    is seeded, so every process draws the same prompts, as TRL's sampler guarantees.
    """

    def __iter__(self):
        self.permutations_drawn += 1
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=self.generator).tolist()
        else:
            order = list(range(self.num_samples))
        batch = [order[position % self.num_samples] for position in range(self.batch_size)]
        for _ in range(self.repeat_count):
            for index in batch:
                yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        return self.batch_size * self.mini_repeat_count * self.repeat_count


def resumable_sampler(sampler):
    """TRL's train sampler as a `ResumableRepeatSampler`, or a `CyclingRepeatSampler` when its dataset is smaller
    than one batch; any other sampler is returned as it is."""
    if type(sampler) is not RepeatSampler:
        return sampler
    sampler_class = CyclingRepeatSampler if sampler.num_samples < sampler.batch_size else ResumableRepeatSampler
    return sampler_class(
        data_source=sampler.data_source,
        mini_repeat_count=sampler.mini_repeat_count,
        batch_size=sampler.batch_size,
        repeat_count=sampler.repeat_count,
        shuffle=sampler.shuffle,
        seed=sampler.seed,
    )
