"""Carrying surplus informative groups (`dynamic_sampling_carry_surplus=True`): the pure sizing and bookkeeping,
and which layouts carrying supports, without a model (the trainer runs are in test_carry.py)."""

from types import SimpleNamespace

import pytest
import torch

from trl_variants import DAPOConfig
from trl_variants.dynamic_sampling.carry import place_generating_logps, rows_to_score, scoring_rows_only
from trl_variants.dynamic_sampling.checkpoint import load_carried_groups, save_carried_groups
from trl_variants.dynamic_sampling.sampler import GeneratedRow
from trl_variants.dynamic_sampling.selection import carry_layout_problem, decide_round, first_round_extra_groups

from ..helpers import toy_config


def test_the_earliest_surplus_is_carried_up_to_capacity():
    informative = [True, False, True, True, False, True, True]
    decision = decide_round(informative, needed=2, fill=False, carry_capacity=2)
    assert decision.trained == [0, 2] and decision.carried == [3, 5] and decision.dropped == [6]
    # Without capacity every surplus group is dropped; filled (degenerate) groups are never carried.
    assert decide_round(informative, needed=2, fill=False, carry_capacity=0).dropped == [3, 5, 6]
    filled = decide_round([False, False], needed=2, fill=True, carry_capacity=4)
    assert filled.filled == [0, 1] and filled.carried == filled.dropped == []
    with pytest.raises(ValueError, match="carry_capacity"):
        decide_round(informative, needed=0, fill=False, carry_capacity=-1)


def test_first_round_asks_only_for_the_groups_carrying_did_not_fill():
    # 64 groups at pass rate 0.44: ceil(64 / 0.44 * 1.2) = 175 in all, 111 beside the dataloader's 64.
    assert first_round_extra_groups(64, 0, 0.44, 1) == 111
    # 20 carried: ceil(44 / 0.44 * 1.2) = 120, so 56 extra.
    assert first_round_extra_groups(64, 20, 0.44, 1) == 56
    # The dataloader's own groups already cover what is expected: nothing extra; a full carry needs nothing.
    assert first_round_extra_groups(64, 40, 0.9, 1) == 0
    assert first_round_extra_groups(8, 8, 0.44, 1) == 0
    # Extra groups stay a multiple of the granularity.
    assert first_round_extra_groups(8, 3, 0.3, 2) % 2 == 0
    with pytest.raises(ValueError, match="carried_groups"):
        first_round_extra_groups(8, 9, 0.44, 1)


def test_carrying_needs_one_of_accumulation_and_generation_to_divide_the_other():
    assert carry_layout_problem(1, 1, 1) is None
    assert carry_layout_problem(4, 2, 2) is None
    assert carry_layout_problem(4, 1, 1) is None  # four generation batches per optimizer step
    assert carry_layout_problem(1, 4, 1) is None  # four optimizer updates per generation batch
    assert carry_layout_problem(2, 4, 1) is None  # two
    assert carry_layout_problem(1, 2, 2) is None  # two iterations over a batch of two steps: four updates
    problem = carry_layout_problem(2, 3, 1)
    assert "gradient_accumulation_steps (2) and steps_per_generation * num_iterations (3 * 1 = 3)" in problem
    assert carry_layout_problem(3, 1, 2) is not None


def test_placing_generating_logps_replaces_only_carried_rows_and_their_real_tokens():
    old = torch.zeros(3, 4)
    rows = [
        SimpleNamespace(generating_logps=None),
        SimpleNamespace(generating_logps=torch.tensor([-1.0, -2.0])),
        SimpleNamespace(generating_logps=torch.tensor([-3.0, -4.0, -5.0, -6.0])),
    ]
    placed = place_generating_logps(old, rows)
    assert placed.tolist() == [[0, 0, 0, 0], [-1, -2, 0, 0], [-3, -4, -5, -6]]
    assert old.abs().sum() == 0  # the input is left untouched


def test_scoring_skips_carried_rows_where_every_process_makes_the_same_forward_calls():
    # One process: every carried row is skipped, even when none is left to score.
    assert rows_to_score([True, False, True, False], [2], chunk=2) == [1, 3]
    assert rows_to_score([True, True], [2], chunk=1) == []
    assert rows_to_score([False, False], [0], chunk=None) == [0, 1]
    # Two processes of 8 rows in chunks of 2. Process 0 holds 2 carried rows (6 fresh: 3 forwards), process 1 holds
    # 5 (3 fresh: 2 forwards), so process 1 scores two carried rows: 5 rows make its third forward.
    carried_0 = [True, True] + [False] * 6
    carried_1 = [True] * 5 + [False] * 3
    assert rows_to_score(carried_0, [2, 5], chunk=2) == [2, 3, 4, 5, 6, 7]
    assert rows_to_score(carried_1, [2, 5], chunk=2) == [0, 1, 5, 6, 7]
    # One forward for the whole batch (no chunk): a process whose rows are all carried still makes it, on one row.
    assert rows_to_score([True] * 4, [4, 1], chunk=None) == [0]
    assert rows_to_score([True, False, False, False], [4, 1], chunk=None) == [1, 2, 3]
    assert rows_to_score([True] * 4, [4, 4], chunk=None) == []


@pytest.mark.parametrize("chunk", [None, 1, 2, 3, 5])
def test_every_process_makes_as_many_forward_calls_as_the_busiest_one(chunk):
    rows, generator = 6, torch.Generator().manual_seed(0)
    for _ in range(50):
        flags = [torch.rand(rows, generator=generator).lt(0.5).tolist() for _ in range(3)]
        counts = [sum(process) for process in flags]
        scored = [rows_to_score(process, counts, chunk) for process in flags]
        calls = [-(-len(picked) // (chunk or len(picked))) if picked else 0 for picked in scored]
        assert len(set(calls)) == 1
        assert calls[0] == max(-(-(rows - count) // (chunk or rows)) for count in counts)
        for process, picked in zip(flags, scored, strict=True):
            assert set(picked) >= {i for i, flag in enumerate(process) if not flag}


def test_scoring_rows_only_hands_the_call_those_rows_and_their_row_inputs():
    calls = []

    def logps_call(model, input_ids, attention_mask, logits_to_keep, batch_size=None, token_type_ids=None, **kwargs):
        calls.append((input_ids.tolist(), token_type_ids.tolist()))
        return input_ids[:, -logits_to_keep:].float().neg(), None, None

    input_ids = torch.arange(12).view(4, 3)
    kwargs = {"batch_size": 2, "token_type_ids": input_ids * 10, "num_images": None}
    logps = scoring_rows_only(logps_call, [1, 3], None, input_ids, torch.ones_like(input_ids), 2, **kwargs)
    assert calls == [([[3, 4, 5], [9, 10, 11]], [[30, 40, 50], [90, 100, 110]])]
    assert logps.tolist() == [[0, 0], [-4, -5], [0, 0], [-10, -11]]
    # No row to score: no call; image inputs (any other input set): every row.
    assert scoring_rows_only(logps_call, [], None, input_ids, input_ids, 2, **kwargs).abs().sum() == 0
    assert len(calls) == 1
    scoring_rows_only(logps_call, [1], None, input_ids, input_ids, 2, **kwargs, pixel_values=torch.zeros(4, 1))
    assert calls[-1][0] == input_ids.tolist()


def test_a_layout_where_neither_divides_the_other_is_refused_only_when_carrying_is_asked_for(tmp_path):
    layout = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "steps_per_generation": 3}
    with pytest.raises(
        ValueError,
        match=r"^dynamic_sampling_carry_surplus=True is not allowed; expected None \(on where supported\) or False, "
        r"because neither of gradient_accumulation_steps \(2\) and steps_per_generation \* num_iterations "
        r"\(3 \* 1 = 3\) divides the other.*; or keep True and make one of them a multiple of the other",
    ):
        toy_config(DAPOConfig, tmp_path, **layout, dynamic_sampling_carry_surplus=True)
    # The default accepts the layout; the trainer then trains without carrying (tests/dynamic_sampling/test_options.py).
    assert toy_config(DAPOConfig, tmp_path, **layout).dynamic_sampling_carry_surplus is None
    assert toy_config(DAPOConfig, tmp_path, **layout, dynamic_sampling_carry_surplus=False)


def carrying_trainer(num_processes: int, per_device_batch: int, group_size: int = 2):
    return SimpleNamespace(
        accelerator=SimpleNamespace(num_processes=num_processes),
        args=SimpleNamespace(per_device_train_batch_size=per_device_batch, steps_per_generation=1, should_save=True),
        num_generations=group_size,
    )


def test_carried_groups_of_a_checkpoint_are_restored_whole_on_any_number_of_processes(tmp_path):
    """Every process holds every carried row, so the main process's one file restores them on 1, 2 or 4 processes;
    a batch too small for them is refused in one line."""
    rows = [
        GeneratedRow(row={"prompt": f"p{i // 2}"}, prompt_ids=[1, i], completion_ids=[i, i + 1], tool_mask=None,
                     logprobs=None, generating_logps=torch.tensor([-0.5, -1.0 - i]), rewards=[float(i % 2)])
        for i in range(6)
    ]  # fmt: skip
    carried = [rows[0:2], rows[2:4], rows[4:6]]
    save_carried_groups(SimpleNamespace(trainer=carrying_trainer(2, 4), carried=carried), str(tmp_path))
    for num_processes, per_device_batch in [(1, 6), (2, 4), (4, 2)]:
        restored = load_carried_groups(carrying_trainer(num_processes, per_device_batch), str(tmp_path))
        assert [[(row.completion_ids, row.rewards) for row in group] for group in restored] == [
            [(row.completion_ids, row.rewards) for row in group] for group in carried
        ]
        assert all(torch.equal(a.generating_logps, b.generating_logps) for a, b in zip(sum(restored, []), rows))
    with pytest.raises(ValueError, match="carries 3 groups into the next batch, which holds 2 groups on 2 processes"):
        load_carried_groups(carrying_trainer(2, 2), str(tmp_path))
    with pytest.raises(ValueError, match="holds 6 carried rows, not whole groups of num_generations=4"):
        load_carried_groups(carrying_trainer(2, 8, group_size=4), str(tmp_path))
