"""The single-process decision recomputed from every rank's step records (scripts/step_records.py): which groups a
multi-process run must have trained at each step, for the two-process and DeepSpeed tests to compare against."""

import itertools

import torch

from trl_variants.dynamic_sampling.selection import plan_carry
from trl_variants.dynamic_sampling.selection import informative_group_mask, select_groups

TOLERANCE = 1e-6  # DAPOConfig's dynamic_sampling_tolerance


def merged(ranks, step, key):
    """A per-rank record of `step` (keyed by number) merged over both ranks: each holds only its own part."""
    values = {}
    for rank in ranks:
        part = {int(number): value for number, value in rank["steps"][step][key].items()}
        assert not set(part) & set(values)
        values.update(part)
    return values


def generated(ranks, step):
    """Every row generated at `step`, by generation-order number, from both ranks' own rows."""
    return merged(ranks, step, "generated")


def trained(ranks, step):
    return sorted(row for rank in ranks for row in rank["steps"][step]["trained"])


def chosen(ranks, step, key):
    """The decision's list of groups (generation-order numbers), put together from what each rank holds."""
    by_position = merged(ranks, step, key)
    assert sorted(by_position) == list(range(len(by_position)))
    return [by_position[position] for position in range(len(by_position))]


def expected_trained(ranks, step, group_size, batch_groups, carry=True):
    """What the selection trains at `step`, computed here from every row's scores (each rank recorded its own):
    the groups carried from the previous step, then the first informative groups in generation order. The ranks,
    which exchanged only counts, must have chosen exactly these, in this order."""
    record = ranks[0]["steps"][step]
    assert all(rank["steps"][step]["shares"] == record["shares"] for rank in ranks)
    rewards = merged(ranks, step, "rewards")
    assert sorted(rewards) == list(range(len(rewards)))
    scores = torch.tensor([rewards[number] for number in range(len(rewards))])[:, 0].view(-1, group_size)
    informative = informative_group_mask(scores, TOLERANCE).tolist()
    starts = itertools.accumulate([0] + [share[1] for share in record["shares"]])
    assert [share[2] for share in record["shares"]] == [
        sum(informative[start : start + share[1]]) for start, share in zip(starts, record["shares"], strict=False)
    ]
    needed = batch_groups - record["carried_groups"]
    selection = select_groups(informative, needed, fill=True)
    assert selection.indices == chosen(ranks, step, "selected")
    capacity = batch_groups if carry else 0
    assert plan_carry(informative, selection.indices, capacity).carried == chosen(ranks, step, "surplus")
    rows = generated(ranks, step)
    expected = [rows[group * group_size + k] for group in selection.indices for k in range(group_size)]
    if step:
        before = generated(ranks, step - 1)
        carried_in = chosen(ranks, step - 1, "surplus")
        expected += [before[group * group_size + k] for group in carried_in for k in range(group_size)]
    return sorted(expected)
