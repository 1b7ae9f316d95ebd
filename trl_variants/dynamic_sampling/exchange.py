"""Which process trains which selected group: the plan of the row exchange after the keep/drop decision, free of
any collective so it can be tested on its own (`row_exchange` carries it out).

Every process generates its own share of each round and keeps its rows. Once the shared decision has picked the
groups to train, the global batch is laid out as TRL expects it: `num_processes * rows_per_process` rows, groups
contiguous, process `p` training rows `[p * rows_per_process, (p + 1) * rows_per_process)`. Group `k` of the
batch fills the *slot* of rows `[k * G, (k + 1) * G)`. The plan chooses which group fills which slot, and which
of a group's rows goes to which of the slot's rows, so that as few rows as possible change process.

The trained groups are exactly the selected ones; only where they are trained changes. Advantages are
normalised per group, and the loss of `loss_type` "dapo", "dr_grpo" and "grpo" sums over rows (with a global or a
per-row normaliser), so the step's loss does not depend on which process trains which group.
"""

from collections import Counter
from dataclasses import dataclass

# A holder for rows that no process holds yet (placeholders for slots left free).
NOWHERE = -1


@dataclass(frozen=True)
class ExchangePlan:
    """`order[k]` is the group that fills slot `k`; `positions[g][i]` is the global batch position of row `i` of
    group `g`, whose process is `position // rows_per_process`."""

    order: list[int]
    positions: list[list[int]]
    rows_per_process: int

    def destination(self, group: int, row: int) -> int:
        return self.positions[group][row] // self.rows_per_process

    def moves(self, holders: list[list[int]]) -> list[tuple[int, int, int, int]]:
        """`(group, row, from_process, to_process)` for every row that changes process, in group and row order."""
        return [
            (group, row, holder, self.destination(group, row))
            for group, group_holders in enumerate(holders)
            for row, holder in enumerate(group_holders)
            if holder != self.destination(group, row)
        ]


def _slot_profile(slot: int, group_size: int, rows_per_process: int) -> Counter:
    return Counter(position // rows_per_process for position in range(slot * group_size, (slot + 1) * group_size))


def _overlap(group_profile: Counter, slot_profile: Counter) -> int:
    return sum(min(count, slot_profile[process]) for process, count in group_profile.items())


def plan_exchange(holders: list[list[int]], rows_per_process: int, num_processes: int) -> ExchangePlan:
    """Lays the groups out over the processes' batches, keeping rows where they are as far as possible.

    `holders[g][i]` is the process that holds row `i` of group `g` (`NOWHERE` for a placeholder row); groups are
    given in batch order, carried groups first. A group's weight on a slot is how many of its rows the slot's
    processes already hold; the heaviest group-slot pairs are taken first, earlier groups and slots winning ties,
    and the groups left over fill the slots left over in order. When every group sits whole on one process and every
    slot lies within one process (the usual case: `rows_per_process` a multiple of the group size), this keeps the
    most groups possible where they were generated, so it moves the fewest rows; otherwise it is a greedy
    approximation. Within a group, rows held by a slot's process stay there, the others fill the free rows in order.
    """
    if not holders:
        raise ValueError("plan_exchange: holders must name at least one group.")
    group_size = len(holders[0])
    if group_size == 0 or any(len(group) != group_size for group in holders):
        raise ValueError(
            f"plan_exchange: every group must have the same number (>= 1) of rows, got {[len(g) for g in holders]}."
        )
    if rows_per_process < 1 or num_processes < 1:
        raise ValueError(
            f"plan_exchange: rows_per_process and num_processes must be >= 1, got {rows_per_process} and "
            f"{num_processes}."
        )
    if len(holders) * group_size != rows_per_process * num_processes:
        raise ValueError(
            f"plan_exchange: {len(holders)} groups of {group_size} rows do not fill {num_processes} processes of "
            f"{rows_per_process} rows."
        )
    unknown = {h for group in holders for h in group if h != NOWHERE and not 0 <= h < num_processes}
    if unknown:
        raise ValueError(f"plan_exchange: holders must be processes in [0, {num_processes}) or NOWHERE, got {unknown}.")

    num_slots = len(holders)
    slot_profiles = [_slot_profile(slot, group_size, rows_per_process) for slot in range(num_slots)]
    slots_on = {process: [] for process in range(num_processes)}
    for slot, profile in enumerate(slot_profiles):
        for process in profile:
            slots_on[process].append(slot)
    group_profiles = [Counter(h for h in group if h != NOWHERE) for group in holders]
    edges = {}
    for group, profile in enumerate(group_profiles):
        for process in profile:
            for slot in slots_on[process]:
                edges[group, slot] = _overlap(profile, slot_profiles[slot])
    slot_of, group_in = {}, {}
    for (group, slot), _ in sorted(edges.items(), key=lambda edge: (-edge[1], edge[0])):
        if group not in slot_of and slot not in group_in:
            slot_of[group], group_in[slot] = slot, group
    free_slots = iter(slot for slot in range(num_slots) if slot not in group_in)
    for group in range(len(holders)):
        if group not in slot_of:
            slot = next(free_slots)
            slot_of[group], group_in[slot] = slot, group

    positions = [
        _row_positions(holders[group], slot_of[group], group_size, rows_per_process) for group in range(len(holders))
    ]
    return ExchangePlan(
        order=[group_in[slot] for slot in range(num_slots)], positions=positions, rows_per_process=rows_per_process
    )


def _row_positions(group_holders: list[int], slot: int, group_size: int, rows_per_process: int) -> list[int]:
    """Global positions for a group's rows in `slot`: a row whose holder trains part of the slot keeps to it."""
    free = list(range(slot * group_size, (slot + 1) * group_size))
    positions = [None] * group_size
    for row, holder in enumerate(group_holders):
        for position in free:
            if position // rows_per_process == holder:
                positions[row] = position
                free.remove(position)
                break
    leftover = iter(free)
    return [position if position is not None else next(leftover) for position in positions]


def plan_carry_destinations(
    holders: list[list[int]], batch_groups: int, rows_per_process: int, num_processes: int
) -> list[list[int]]:
    """The process each row of the carried groups moves to now, so that the next batch trains it where it lies.

    The carried groups are laid out as the first groups of a batch of `batch_groups` whose other slots are free
    (`NOWHERE` placeholders): each process receives no more carried rows than its share of the next batch, and
    `plan_exchange` of the next batch, which takes carried groups first, leaves them in place.
    """
    if len(holders) > batch_groups:
        raise ValueError(f"plan_carry_destinations: {len(holders)} carried groups exceed the batch's {batch_groups}.")
    if not holders:
        return []
    group_size = len(holders[0])
    padded = holders + [[NOWHERE] * group_size for _ in range(batch_groups - len(holders))]
    plan = plan_exchange(padded, rows_per_process, num_processes)
    return [[plan.destination(group, row) for row in range(group_size)] for group in range(len(holders))]
