"""The pure pieces of prompt skipping (trl_variants/experimental/prompt_skipping/streak.py) and its config checks, without a
model: the per-prompt history, the skip rule and its statistics, the bounded picking and the adaptation of p."""

import math

import numpy as np
import pytest
import torch

from trl_variants import DAPOConfig
from trl_variants.dynamic_sampling.selection import all_correct_groups, degenerate_outcomes, informative_group_mask
from trl_variants.experimental.prompt_skipping.streak import ALL_CORRECT, ALL_WRONG, INFORMATIVE, UNSCORED
from trl_variants.experimental.prompt_skipping.streak import MAX_CANDIDATES_PER_PROMPT, MAX_STREAK, PromptHistory, adapt_explore_probability, explore_probabilities, group_outcomes, pick_prompts
from trl_variants.dynamic_sampling.prompt_sources import DatasetIndices, RecordingSampler


def outcomes_of(rows: list[list[float]]) -> list[int]:
    scores = torch.tensor(rows)
    return group_outcomes(scores, informative_group_mask(scores, 1e-6)).tolist()


@pytest.mark.parametrize(
    "right, wrong",
    [(1.0, -1.0), (1.0, 0.0)],
    ids=["plus-minus-one", "one-zero"],
)
def test_outcomes_split_all_correct_from_all_wrong_for_both_reward_conventions(right, wrong):
    nan = math.nan
    rows = [[right] * 4, [wrong] * 4, [right, wrong, right, wrong], [nan] * 4, [right, nan, right, nan]]
    assert outcomes_of(rows) == [ALL_CORRECT, ALL_WRONG, INFORMATIVE, UNSCORED, ALL_CORRECT]
    # The same rule as the all_correct_frac / all_wrong_frac metrics.
    scores = torch.tensor(rows)
    assert degenerate_outcomes(scores, informative_group_mask(scores, 1e-6)) == (2, 1)


def test_the_metrics_and_both_predictors_split_degenerate_groups_by_one_rule():
    """`degenerate_outcomes` (the metrics), `group_outcomes` (streak) and `completion_successes` (posterior) all
    call `selection.all_correct_groups`: on degenerate groups of any common score they agree with it."""
    from trl_variants.experimental.prompt_skipping.posterior import completion_successes

    nan = math.nan
    rows = [[value] * 4 for value in (2.0, 1e-7, 0.0, -1e-7, -3.0)] + [[nan, 0.5, 0.5, nan], [nan] * 4]
    scores = torch.tensor(rows)
    informative = informative_group_mask(scores, 1e-6)
    assert not informative.any()
    correct = all_correct_groups(scores).tolist()
    assert correct == [True, True, False, False, False, True, False]
    assert degenerate_outcomes(scores, informative) == (sum(correct), len(rows) - 1 - sum(correct))
    assert outcomes_of(rows) == [ALL_CORRECT if c else ALL_WRONG for c in correct[:-1]] + [UNSCORED]
    right, scored = completion_successes(scores, informative)
    assert (right.sum(dim=1) == scored.sum(dim=1)).tolist() == [c or i == len(rows) - 1 for i, c in enumerate(correct)]
    assert (right.sum(dim=1) > 0).tolist() == correct


def test_history_counts_consecutive_degenerate_visits_of_one_kind():
    history = PromptHistory(5)
    history.record([0, 1, 2, 0, 1, 0], [ALL_CORRECT, ALL_WRONG, INFORMATIVE, ALL_CORRECT, ALL_WRONG, ALL_CORRECT])
    assert history.streak.tolist() == [3, 2, 0, 0, 0]
    assert history.kind.tolist() == [ALL_CORRECT, ALL_WRONG, INFORMATIVE, INFORMATIVE, INFORMATIVE]
    # An informative visit ends the streak; a visit of the other kind starts a new one at 1.
    history.record([0, 1], [INFORMATIVE, ALL_CORRECT])
    assert history.streak.tolist()[:2] == [0, 1]
    assert history.kind.tolist()[:2] == [INFORMATIVE, ALL_CORRECT]
    # Unscored visits and unknown rows change nothing; rows outside the dataset are refused.
    history.record([1, -1], [UNSCORED, ALL_WRONG])
    assert history.streak.tolist() == [0, 1, 0, 0, 0]
    with pytest.raises(IndexError, match="row 5 is outside the dataset of 5 rows"):
        history.record([5], [ALL_WRONG])


def test_history_streak_saturates_instead_of_wrapping():
    history = PromptHistory(1)
    history.record([0] * (MAX_STREAK + 10), [ALL_WRONG] * (MAX_STREAK + 10))
    assert int(history.streak[0]) == MAX_STREAK == 255


def test_history_of_ten_million_rows_fits_in_twenty_megabytes():
    history = PromptHistory(10_000_000)
    assert sum(array.nbytes for array in history.arrays().values()) == 20_000_000


def test_history_arrays_round_trip_and_refuse_another_dataset_size(tmp_path):
    history = PromptHistory(4)
    history.record([0, 3, 3], [ALL_CORRECT, ALL_WRONG, ALL_WRONG])
    np.savez_compressed(tmp_path / "h.npz", **history.arrays())
    restored = PromptHistory(4)
    with np.load(tmp_path / "h.npz") as arrays:
        restored.load_arrays(arrays)
    assert restored.streak.tolist() == [1, 0, 0, 2] and restored.kind.tolist() == history.kind.tolist()
    with pytest.raises(ValueError, match="covers 4 rows, this dataset has 5"):
        PromptHistory(5).load_arrays(history.arrays())


def test_explore_probability_is_p_to_the_streak_with_a_floor():
    history = PromptHistory(4)
    history.record([1, 2, 2, 3, 3, 3], [ALL_CORRECT, ALL_WRONG, ALL_WRONG] + [ALL_WRONG] * 3)
    probabilities = explore_probabilities(history, [0, 1, 2, 3, -1], p_easy=0.8, p_hard=0.5, floor=0.2)
    assert probabilities.tolist() == pytest.approx([1.0, 0.8, 0.25, 0.2, 1.0])  # 0.5**3 = 0.125 < floor
    # p = 0 still explores at the floor: exploration never reaches zero.
    assert explore_probabilities(history, [1, 3], p_easy=0.0, p_hard=0.0, floor=0.01).tolist() == [0.01, 0.01]


def test_skip_decisions_follow_the_explore_probability():
    """Over many decisions, a streak-2 prompt with p = 0.5 is generated a quarter of the time (binomial, 5 sigma);
    when it is skipped, row 1 (no history) replaces it."""
    history = PromptHistory(2)
    history.record([0, 0], [ALL_WRONG, ALL_WRONG])
    rng = np.random.default_rng(0)
    trials = 4000
    kept = 0
    for _ in range(trials):
        picked = pick_prompts(
            [0], lambda n: [1] * n, 1, lambda ids: explore_probabilities(history, ids, 0.5, 0.5, 0.01), rng
        )
        kept += picked.kept[:1] == [0]
    sigma = math.sqrt(trials * 0.25 * 0.75)
    assert abs(kept - trials * 0.25) < 5 * sigma


def test_pick_keeps_first_candidates_in_order_and_replaces_skipped_ones_by_draws():
    history = PromptHistory(10)
    history.record([1, 3], [ALL_CORRECT, ALL_WRONG])
    draws = iter(range(4, 10))
    picked = pick_prompts(
        [0, 1, 2, 3],
        lambda n: [next(draws) for _ in range(n)],
        4,
        lambda ids: explore_probabilities(history, ids, 0.0, 0.0, 1e-9),
        np.random.default_rng(0),
    )
    assert picked.kept == [0, 2, 4, 5] and picked.skipped == [1, 3] and picked.forced == []
    assert picked.candidates == [False, False, False, False]


def test_a_draw_that_returns_nothing_ends_the_pick_with_fewer_prompts():
    """A stream with no unread prompt: the pick keeps what it found instead of asking again forever."""
    history = PromptHistory(10)
    draws = iter([[4], []])
    picked = pick_prompts(
        [0], lambda n: next(draws), 3, lambda ids: explore_probabilities(history, ids, 0.5, 0.5, 0.01),
        np.random.default_rng(0),
    )  # fmt: skip
    assert picked.prompts == [0, 4] and picked.skipped == []


def test_all_degenerate_dataset_is_picked_in_bounded_draws():
    """Every row predicted degenerate at the floor: the pick ends after a bounded number of draws, with exactly the
    prompts needed, the most likely ones forced."""
    size, needed = 50, 8
    history = PromptHistory(size)
    history.record(list(range(size)) * 3, [ALL_WRONG] * (3 * size))
    history.record([7], [INFORMATIVE])
    history.record([7], [ALL_WRONG])  # row 7: streak 1, the most likely to be informative
    drawn = []

    def draw(count):
        rows = [(len(drawn) + i) % size for i in range(count)]
        drawn.extend(rows)
        return rows

    picked = pick_prompts(
        [], draw, needed, lambda ids: explore_probabilities(history, ids, 1e-4, 1e-4, 1e-12), np.random.default_rng(0)
    )
    assert len(picked.prompts) == needed
    assert len(drawn) == MAX_CANDIDATES_PER_PROMPT * needed
    assert picked.forced and 7 in picked.forced
    assert len(picked.kept) + len(picked.forced) + len(picked.skipped) == len(drawn)
    assert all(picked.candidates)


def test_adaptation_moves_toward_the_target_within_bounds():
    assert adapt_explore_probability(0.5, 0.4, 0.1, 0.05, 0.01) == pytest.approx(0.45)  # too many: skip more
    assert adapt_explore_probability(0.5, 0.0, 0.1, 0.05, 0.01) == pytest.approx(0.55)  # too few: skip less
    assert adapt_explore_probability(0.5, 0.1, 0.1, 0.05, 0.01) == 0.5
    assert adapt_explore_probability(0.02, 1.0, 0.1, 0.05, 0.01) == 0.01
    assert adapt_explore_probability(0.99, 0.0, 0.1, 0.05, 0.01) == 1.0
    p = 0.5
    for _ in range(200):
        p = adapt_explore_probability(p, 1.0, 0.0, 0.01, 0.01)
    assert p == 0.01


@pytest.mark.parametrize(
    "overrides, field_name",
    [
        (dict(skip_degenerate_prompts=True, dynamic_sampling=False), "skip_degenerate_prompts"),
        (dict(skip_degenerate_prompts=True, skip_target_degenerate_share=1.0), "skip_target_degenerate_share"),
        (dict(skip_degenerate_prompts=True, skip_target_degenerate_share=-0.1), "skip_target_degenerate_share"),
        (dict(skip_degenerate_prompts=True, skip_probability_step=0.0), "skip_probability_step"),
        (dict(skip_degenerate_prompts=True, skip_min_explore_probability=0.0), "skip_min_explore_probability"),
        (dict(skip_degenerate_prompts=True, skip_min_explore_probability=1.5), "skip_min_explore_probability"),
    ],
)
def test_bad_skipping_settings_are_refused_naming_the_field(tmp_path, overrides, field_name):
    with pytest.raises(ValueError, match=rf"^{field_name}=.* is not allowed; expected"):
        DAPOConfig(str(tmp_path), use_cpu=True, **overrides)


def test_skipping_defaults(tmp_path):
    config = DAPOConfig(str(tmp_path), use_cpu=True)
    assert config.skip_degenerate_prompts is False  # off, as the real-model study decided
    assert (config.skip_target_degenerate_share, config.skip_probability_step) == (0.25, 0.01)
    assert config.skip_min_explore_probability == 0.01


class EpochSampler:
    """A sampler yielding a fixed stream, with the `generator` and `set_epoch` that accelerate and the Trainer use."""

    def __init__(self, stream):
        self.stream = stream
        self.generator = torch.Generator()
        self.epochs = []

    def __iter__(self):
        return iter(self.stream)

    def __len__(self):
        return len(self.stream)

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def test_recording_sampler_yields_the_stream_and_hands_each_process_its_slice():
    inner = EpochSampler([5, 5, 7, 7, 1, 1, 3, 3])
    sampler = RecordingSampler(inner)
    assert list(sampler) == inner.stream and len(sampler) == 8
    # Two processes, two rows each: process 1 gets the second slice of each global batch of four.
    assert sampler.take_batch(2, process_index=1, num_processes=2) == [7, 7]
    assert sampler.take_batch(2, process_index=1, num_processes=2) == [3, 3]
    with pytest.raises(RuntimeError, match="recorded only 0 of the 4 indices"):
        sampler.take_batch(2, process_index=0, num_processes=2)
    # What accelerate and the Trainer touch is the wrapped sampler's.
    assert sampler.generator is inner.generator
    sampler.set_epoch(3)
    assert inner.epochs == [3]


def test_recording_sampler_drops_a_resumed_epochs_skipped_batches_and_restarts_each_pass():
    sampler = RecordingSampler(EpochSampler([0, 1, 2, 3, 4, 5]))
    sampler.skip_batches(2)
    iterator = iter(sampler)
    drawn = [next(iterator) for _ in range(6)]
    assert drawn == [0, 1, 2, 3, 4, 5]
    assert sampler.take_batch(2, process_index=0, num_processes=1) == [4, 5]
    # A new pass forgets what the previous one drew but never delivered.
    next(iter(sampler))
    assert sampler.take_batch(1, process_index=0, num_processes=1) == [0]


def test_recording_sampler_finds_batches_a_trainer_skipped_without_announcing_them():
    # transformers releases without `get_resumed_dataloader` skip a resumed epoch's batches unannounced: the
    # delivered rows then tell how many whole batches to drop. Two processes, two rows each.
    sampler = RecordingSampler(EpochSampler([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]))
    list(sampler)
    delivered_first = 4  # the third global batch's process-0 slice starts at index 4
    assert sampler.take_batch(2, 0, 2, delivered=lambda indices: indices[0] == delivered_first) == [4, 4]
    with pytest.raises(RuntimeError, match="recorded only 0 of the 4 indices"):
        sampler.take_batch(2, 0, 2, delivered=lambda indices: True)
    sampler = RecordingSampler(EpochSampler([0, 1, 2, 3]))
    list(sampler)
    # A batch that matches no recorded one is refused, naming the last index it was compared with.
    with pytest.raises(RuntimeError, match="first row is not row 3 of train_dataset"):
        sampler.take_batch(1, 0, 1, delivered=lambda indices: False)
    # After an announced skip the batch must match at once: no search past it.
    sampler = RecordingSampler(EpochSampler([0, 1, 2, 3]))
    sampler.skip_batches(1)
    list(sampler)
    with pytest.raises(RuntimeError, match="first row is not row 1 of train_dataset"):
        sampler.take_batch(1, 0, 1, delivered=lambda indices: indices[0] == 2)


def test_batch_rows_are_named_by_identity_not_by_content():
    first, twin = {"prompt": "a"}, {"prompt": "a"}
    indices = DatasetIndices("skip_degenerate_prompts", streaming=False, train_dataset=[{"prompt": "a"}] * 10)
    indices.recording = RecordingSampler(EpochSampler([4, 9]))
    list(indices.recording)
    indices.pair_batch([first, twin], process_index=0, num_processes=1)
    assert (indices.key(first), indices.key(twin)) == (4, 9)
    assert indices.key({"prompt": "a"}) == -1  # an equal row that the dataloader did not deliver