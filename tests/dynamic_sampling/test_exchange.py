"""The plan of which process trains which selected group (`exchange`), which process generates which row
(`layout`), and the placement glue run for every rank of a simulated job (`placement`), all without a model or a
process group."""

import itertools
import random

import pytest
import torch

from trl_variants.dynamic_sampling.placement import NOWHERE, plan_carry_destinations, plan_exchange
from trl_variants.dynamic_sampling.placement import call_order
from trl_variants.dynamic_sampling.placement import CarriedGroups, place_batch
from trl_variants.dynamic_sampling.placement import GeneratedPool, GeneratedRow, OwnShare
from trl_variants.dynamic_sampling.selection import GroupRef, Share


def trained_layout(plan, holders, rows_per_process):
    """Per process, the (group, row) pairs it trains, in batch order."""
    at = {plan.positions[g][r]: (g, r) for g in range(len(holders)) for r in range(len(holders[g]))}
    total = len(at)
    return [[at[position] for position in range(p * rows_per_process, (p + 1) * rows_per_process)]
            for p in range(total // rows_per_process)]  # fmt: skip


def check_valid(plan, holders, rows_per_process):
    """Every row of every group gets one position, groups fill contiguous slots in `plan.order`."""
    group_size = len(holders[0])
    positions = sorted(position for group in plan.positions for position in group)
    assert positions == list(range(len(holders) * group_size))
    assert sorted(plan.order) == list(range(len(holders)))
    for slot, group in enumerate(plan.order):
        assert sorted(plan.positions[group]) == list(range(slot * group_size, (slot + 1) * group_size))


def whole(process, group_size=4):
    return [process] * group_size


def test_groups_already_in_place_do_not_move():
    holders = [whole(0), whole(1), whole(0), whole(1)]
    plan = plan_exchange(holders, rows_per_process=8, num_processes=2)
    check_valid(plan, holders, 8)
    assert plan.moves(holders) == []
    # Each process trains its own groups, earlier ones first.
    assert plan.order == [0, 2, 1, 3]


def test_all_selected_groups_on_one_process_move_only_the_overflow():
    holders = [whole(1)] * 4
    plan = plan_exchange(holders, rows_per_process=8, num_processes=2)
    check_valid(plan, holders, 8)
    moves = plan.moves(holders)
    # Process 1 can train only 8 of the 16 rows: the other 8 (two whole groups) must move, and nothing more.
    assert len(moves) == 8 and {(source, target) for _, _, source, target in moves} == {(1, 0)}
    assert {group for group, _, _, _ in moves} == {2, 3}  # the earliest groups stay


def test_uneven_generation_moves_one_group():
    holders = [whole(0), whole(0), whole(0), whole(1)]
    plan = plan_exchange(holders, rows_per_process=8, num_processes=2)
    moves = plan.moves(holders)
    assert len(moves) == 4 and {(g, s, t) for g, _, s, t in moves} == {(2, 0, 1)}


def test_carried_groups_come_first_and_keep_their_place():
    # Groups 0 and 1 are carried (listed first), both on process 0 as the previous step placed them; the fresh
    # groups 2 and 3 were also generated on process 0, so they are the ones that move.
    holders = [whole(0), whole(0), whole(0), whole(0)]
    plan = plan_exchange(holders, rows_per_process=8, num_processes=2)
    assert {group for group, _, _, _ in plan.moves(holders)} == {2, 3}


def test_degenerate_fill_groups_are_placed_like_any_other():
    # A filled batch mixes informative and degenerate groups; the plan sees only groups and where their rows are.
    holders = [whole(1), whole(0), whole(1), whole(1)]
    plan = plan_exchange(holders, rows_per_process=8, num_processes=2)
    check_valid(plan, holders, 8)
    assert len(plan.moves(holders)) == 4


def test_groups_spanning_processes_keep_their_rows_in_place():
    # Two rows per process, four-row groups: every slot spans two processes.
    holders = [[2, 2, 3, 3], [0, 0, 1, 1]]
    plan = plan_exchange(holders, rows_per_process=2, num_processes=4)
    check_valid(plan, holders, 2)
    assert plan.moves(holders) == []
    assert plan.order == [1, 0]


def test_slots_straddling_processes():
    # Six rows per process, groups of four: slot 1 is two rows on process 0 and two on process 1.
    holders = [[1, 1, 0, 0], whole(0), whole(1)]
    plan = plan_exchange(holders, rows_per_process=6, num_processes=2)
    check_valid(plan, holders, 6)
    assert plan.moves(holders) == []
    layout = trained_layout(plan, holders, 6)
    assert sorted(layout[0]) == [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]


def fewest_moves(holders, rows_per_process, num_processes):
    """Brute force over every group order, with rows placed on their holder where the slot allows."""
    group_size = len(holders[0])
    best = None
    for order in itertools.permutations(range(len(holders))):
        moved = 0
        for slot, group in enumerate(order):
            free = [p // rows_per_process for p in range(slot * group_size, (slot + 1) * group_size)]
            for holder in holders[group]:
                if holder in free:
                    free.remove(holder)
                else:
                    moved += 1
        best = moved if best is None else min(best, moved)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_whole_groups_move_the_fewest_rows_possible(seed):
    rng = random.Random(seed)
    num_processes = rng.choice([2, 3, 4])
    groups_per_process = rng.choice([1, 2])
    group_size = rng.choice([2, 4])
    holders = [whole(rng.randrange(num_processes), group_size) for _ in range(num_processes * groups_per_process)]
    rows_per_process = groups_per_process * group_size
    plan = plan_exchange(holders, rows_per_process, num_processes)
    check_valid(plan, holders, rows_per_process)
    assert len(plan.moves(holders)) == fewest_moves(holders, rows_per_process, num_processes)


@pytest.mark.parametrize("seed", range(20))
def test_any_layout_is_valid_and_no_worse_than_batch_order(seed):
    rng = random.Random(seed)
    num_processes, group_size = rng.choice([(2, 4), (3, 2), (4, 4)])
    rows_per_process = rng.choice([r for r in (2, 3, 4, 6, 8) if (r * num_processes) % group_size == 0])
    num_groups = rows_per_process * num_processes // group_size
    holders = [[rng.randrange(num_processes) for _ in range(group_size)] for _ in range(num_groups)]
    plan = plan_exchange(holders, rows_per_process, num_processes)
    check_valid(plan, holders, rows_per_process)
    in_batch_order = sum(
        holder != (g * group_size + r) // rows_per_process
        for g, group in enumerate(holders)
        for r, holder in enumerate(group)
    )
    assert len(plan.moves(holders)) <= in_batch_order


def overflow_rows(holders, rows_per_process, num_processes):
    """Rows that must leave a process holding more whole groups than it trains: a lower bound on any plan."""
    group_size = len(holders[0])
    held = [sum(group[0] == process for group in holders) for process in range(num_processes)]
    return group_size * sum(max(0, count - rows_per_process // group_size) for count in held)


@pytest.mark.parametrize("seed", range(30))
def test_whole_groups_move_exactly_the_overflow_at_many_processes(seed):
    # Beyond brute force's reach: the plan meets the lower bound, which is therefore the fewest moves.
    rng = random.Random(seed)
    num_processes = rng.choice([8, 16, 64])
    groups_per_process, group_size = rng.choice([1, 2, 4]), rng.choice([2, 4])
    skew = rng.random()
    holders = [
        whole(min(int(rng.random() ** (1 + 3 * skew) * num_processes), num_processes - 1), group_size)
        for _ in range(num_processes * groups_per_process)
    ]
    rows_per_process = groups_per_process * group_size
    plan = plan_exchange(holders, rows_per_process, num_processes)
    check_valid(plan, holders, rows_per_process)
    assert len(plan.moves(holders)) == overflow_rows(holders, rows_per_process, num_processes)


@pytest.mark.parametrize("seed", range(20))
def test_carried_groups_move_only_their_overflow_and_then_stay(seed):
    rng = random.Random(seed)
    num_processes, groups_per_process = rng.choice([(2, 4), (4, 4), (16, 2)])
    batch_groups, rows_per_process = num_processes * groups_per_process, groups_per_process * 4
    carried = [whole(rng.randrange(min(2, num_processes))) for _ in range(rng.randrange(1, batch_groups + 1))]
    destinations = plan_carry_destinations(carried, batch_groups, rows_per_process, num_processes)
    moved = sum(h != d for hs, ds in zip(carried, destinations) for h, d in zip(hs, ds))
    assert moved == overflow_rows(carried, rows_per_process, num_processes)
    # The next batch: every fresh group on the process that generated it; carried groups never move again.
    fresh = [whole(rng.randrange(num_processes)) for _ in range(batch_groups - len(carried))]
    holders = destinations + fresh
    plan = plan_exchange(holders, rows_per_process, num_processes)
    assert all(group >= len(carried) for group, _, _, _ in plan.moves(holders))
    assert len(plan.moves(holders)) == overflow_rows(holders, rows_per_process, num_processes)


def test_placeholder_groups_take_the_slots_left_free():
    holders = [whole(1), [NOWHERE] * 4]
    plan = plan_exchange(holders, rows_per_process=4, num_processes=2)
    assert plan.order == [1, 0]
    assert [move[:2] for move in plan.moves(holders)] == [(1, row) for row in range(4)]  # placeholders always "move"


def test_plan_rejects_bad_input():
    with pytest.raises(ValueError, match="do not fill 2 processes of 8 rows"):
        plan_exchange([whole(0)] * 3, rows_per_process=8, num_processes=2)
    with pytest.raises(ValueError, match="same number"):
        plan_exchange([whole(0), [0, 0]], rows_per_process=3, num_processes=2)
    with pytest.raises(ValueError, match=r"holders must be processes in \[0, 2\)"):
        plan_exchange([whole(0), whole(5)], rows_per_process=4, num_processes=2)
    with pytest.raises(ValueError, match="at least one group"):
        plan_exchange([], rows_per_process=4, num_processes=2)


def test_carried_groups_go_where_the_next_batch_trains_them():
    # Three surplus groups, all generated on process 1; the next batch has two groups per process.
    carried = [whole(1), whole(1), whole(1)]
    destinations = plan_carry_destinations(carried, batch_groups=4, rows_per_process=8, num_processes=2)
    assert destinations == [whole(1), whole(1), whole(0)]
    # Next step: carried groups first, fresh ones (generated anywhere) after; the carried ones stay put.
    next_holders = destinations + [whole(1)]
    plan = plan_exchange(next_holders, rows_per_process=8, num_processes=2)
    assert all(group == 3 for group, _, _, _ in plan.moves(next_holders))
    assert plan_carry_destinations([], batch_groups=4, rows_per_process=8, num_processes=2) == []
    with pytest.raises(ValueError, match="exceed"):
        plan_carry_destinations([whole(0)] * 5, batch_groups=4, rows_per_process=8, num_processes=2)


def test_call_order_gives_each_process_its_share_of_every_segment():
    assert call_order([8], 2) == list(range(8))
    # Dataloader segment of 4 rows, refill segment of 2: process 0 generates rows 0, 1 and 4, process 1 rows 2, 3, 5.
    assert call_order([4, 2], 2) == [0, 1, 4, 2, 3, 5]
    with pytest.raises(ValueError, match="split evenly over 2 processes"):
        call_order([4, 3], 2)


# placement: every rank of a simulated job runs `place_batch` on its own rows; messages are routed between them.


def row(name, reward=0.0):
    return GeneratedRow(row={"prompt": name}, prompt_ids=[1], completion_ids=[2], tool_mask=None, logprobs=None,
                        rewards=[reward])  # fmt: skip


def simulate(carried_by_rank, pools, trained, surplus, group_size, rows_per_process):
    """Runs `place_batch` for every rank; a first pass records what each sends, a second delivers it."""
    num_processes = len(pools)
    sent = {}

    class Recorded(Exception):
        pass

    def recording(process):
        def exchange(outgoing, senders):
            sent[process] = outgoing
            raise Recorded

        return exchange

    for process in range(num_processes):
        try:
            place_batch(carried_by_rank[process], pools[process], trained, surplus, group_size, rows_per_process,
                        num_processes, process, recording(process))  # fmt: skip
        except Recorded:
            pass
    results = []
    for process in range(num_processes):

        def delivering(outgoing, senders, process=process):
            assert outgoing == sent.get(process, outgoing)
            return {sender: sent[sender][process] for sender in senders}

        results.append(place_batch(carried_by_rank[process], pools[process], trained, surplus, group_size,
                                   rows_per_process, num_processes, process, delivering))  # fmt: skip
    return results, sent


def pools_of(flags_by_process, group_size):
    """One segment's pools: process `p` generated groups named `g<n>` (numbered over the segment in generation
    order, rewards `n * group_size + row`), informative where `flags_by_process[p]` says so."""
    shares = [Share(p, len(flags), sum(flags)) for p, flags in enumerate(flags_by_process)]
    pools, number = [], 0
    for process, flags in enumerate(flags_by_process):
        groups = []
        for _ in flags:
            groups.append([row(f"g{number}r{r}", number * group_size + r) for r in range(group_size)])
            number += 1
        own = OwnShare(groups=groups, scores=torch.zeros(len(flags), group_size), informative=list(flags))
        pools.append(GeneratedPool(shares=shares, own={process: own}))
    return pools


def test_placement_gives_each_rank_whole_groups_and_carries_surplus_to_its_trainer():
    group_size, rows_per_process, num_processes = 2, 4, 2
    # Six fresh groups: process 0 generated g0-g2 (g1 degenerate), process 1 g3-g5 (g3 degenerate).
    pools = pools_of([[True, False, True], [False, True, True]], group_size)
    # One carried group (rows "c0r0", "c0r1"), held by process 1 as the previous step placed it.
    carried = [
        CarriedGroups(holders=[[1, 1]], rows={}),
        CarriedGroups(holders=[[1, 1]], rows={(0, 0): row("c0r0", 100), (0, 1): row("c0r1", 101)}),
    ]
    # Trained: the first informative group of each process (g0, g4) and process 0's degenerate g1; carried on:
    # process 0's second informative group (g2) and process 1's (g5).
    trained = [GroupRef(0, True, 0), GroupRef(1, True, 0), GroupRef(0, False, 0)]
    surplus = [GroupRef(0, True, 1), GroupRef(1, True, 1)]
    results, sent = simulate(carried, pools, trained, surplus, group_size=group_size,
                             rows_per_process=rows_per_process)  # fmt: skip
    trained_rows = [[r.row["prompt"] for r in batch.local] for batch, _ in results]
    # Nothing trained had to move: each rank trains whole groups it holds.
    assert trained_rows == [["g0r0", "g0r1", "g1r0", "g1r1"], ["c0r0", "c0r1", "g4r0", "g4r1"]]
    rewards = [[r.rewards[0] for r in batch.local] for batch, _ in results]
    assert rewards == [[0, 1, 2, 3], [100, 101, 8, 9]]
    assert all(batch.has_carried for batch, _ in results)
    assert all(batch.carried_rows == [0, 2] for batch, _ in results)  # rank 1 trains the carried group
    # The surplus: g2 (process 0's) and g5 (process 1's) both stay where they are; no message at all.
    carried_next = [next_carried for _, next_carried in results]
    assert carried_next[0].holders == carried_next[1].holders == [[0, 0], [1, 1]]
    assert [r.row["prompt"] for r in carried_next[0].rows.values()] == ["g2r0", "g2r1"]
    assert [r.row["prompt"] for r in carried_next[1].rows.values()] == ["g5r0", "g5r1"]
    assert [r.rewards[0] for r in carried_next[1].rows.values()] == [10, 11]
    assert all(not outgoing for outgoing in sent.values())


def test_placement_moves_the_overflow_in_one_message_with_its_rewards():
    group_size, rows_per_process = 2, 4
    pools = pools_of([[True] * 4, []], group_size)
    empty = [CarriedGroups(), CarriedGroups()]
    trained = [GroupRef(0, True, k) for k in range(4)]
    results, sent = simulate(empty, pools, trained, [], group_size=group_size, rows_per_process=rows_per_process)
    trained_rows = [[r.row["prompt"] for r in batch.local] for batch, _ in results]
    assert trained_rows == [["g0r0", "g0r1", "g1r0", "g1r1"], ["g2r0", "g2r1", "g3r0", "g3r1"]]
    assert [r.rewards[0] for r in results[1][0].local] == [4, 5, 6, 7]
    assert set(sent) == {0, 1} and list(sent[0]) == [1] and len(sent[0][1]) == 4 and sent[1] == {}
    assert all(not batch.has_carried and batch.carried_rows == [0, 0] for batch, _ in results)
