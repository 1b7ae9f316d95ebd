"""The keep/drop decision from per-share counts (`shares`) against the decision on every group's true flags."""

import random

import pytest

from trl_variants.dynamic_sampling.selection import plan_carry
from trl_variants.dynamic_sampling.selection import select_groups
from trl_variants.dynamic_sampling.selection import GroupRef, Share, group_ref, local_position, segment_shares, share_flags


def located(flags_by_share, indices):
    """(share, position in the share) of each generation-order index of the true flags."""
    where = [(share, position) for share, flags in enumerate(flags_by_share) for position in range(len(flags))]
    return [where[index] for index in indices]


def from_counts(shares, flags_by_share, indices):
    """What each holder resolves the count-based decision's choices to."""
    refs = [group_ref(shares, index) for index in indices]
    return [(ref.share, local_position(flags_by_share[ref.share], ref)) for ref in refs]


def test_counts_choose_exactly_the_groups_and_order_the_true_flags_choose():
    for seed in range(300):
        check_random_case(random.Random(seed))


def check_random_case(rng):
    num_processes = rng.randint(1, 4)
    segments = rng.randint(1, 3)
    flags_by_share = []
    shares = []
    for _ in range(segments):
        groups = rng.randint(0, 4)
        counts = []
        for _ in range(num_processes):
            flags = [rng.random() < rng.choice([0.1, 0.5, 0.9]) for _ in range(groups)]
            flags_by_share.append(flags)
            counts.append(sum(flags))
        shares.extend(segment_shares(groups, counts))
    true_flags = [flag for flags in flags_by_share for flag in flags]
    needed = rng.randint(0, max(1, len(true_flags)))
    fill = rng.random() < 0.5
    capacity = rng.randint(0, 4)

    true_selection = select_groups(true_flags, needed, fill)
    true_carry = plan_carry(true_flags, true_selection.indices, capacity)
    flags = share_flags(shares)
    selection = select_groups(flags, needed, fill)
    carry = plan_carry(flags, selection.indices, capacity)

    assert (len(selection.kept), len(selection.filled)) == (len(true_selection.kept), len(true_selection.filled))
    assert from_counts(shares, flags_by_share, selection.indices) == located(flags_by_share, true_selection.indices)
    assert from_counts(shares, flags_by_share, carry.carried) == located(flags_by_share, true_carry.carried)
    assert len(carry.dropped) == len(true_carry.dropped)


def test_share_flags_put_each_shares_informative_groups_first():
    shares = [Share(0, 3, 1), Share(1, 3, 2), Share(0, 1, 0)]
    assert share_flags(shares) == [True, False, False, True, True, False, False]
    assert [group_ref(shares, i) for i in (0, 1, 4, 5, 6)] == [
        GroupRef(0, True, 0), GroupRef(0, False, 0), GroupRef(1, True, 1), GroupRef(1, False, 0), GroupRef(2, False, 0)
    ]  # fmt: skip
    assert local_position([False, True, False, True], GroupRef(0, True, 1)) == 3
    assert local_position([False, True, False, True], GroupRef(0, False, 1)) == 2


def test_bad_shares_and_references_are_refused():
    with pytest.raises(ValueError, match="informative <= groups"):
        Share(0, 2, 3)
    with pytest.raises(ValueError, match="beyond the 2 groups"):
        group_ref([Share(0, 2, 1)], 2)
    with pytest.raises(ValueError, match="has 1 informative groups, not 2"):
        local_position([True, False], GroupRef(0, True, 1))
