"""After the keep/drop decision: lays the trained batch out over the processes and moves the rows that must move.

The groups trained are the carried groups then the chosen fresh ones, as the decision picked them (`shares`): every
process knows which process holds each, not its rows. The plan (`exchange.plan_exchange`) chooses which process
trains each, keeping rows where they are as far as it can. Carried groups are sent now to the process that will
train them next step (`exchange.plan_carry_destinations`). Both moves go in one exchange, through the `exchange`
callable (`row_exchange.exchange_objects` in training); a row that moves takes its rewards with it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from .exchange import plan_carry_destinations, plan_exchange
from .rounds import GeneratedPool, GeneratedRow
from .shares import GroupRef


@dataclass
class CarriedGroups:
    """Surplus informative groups carried to the next batch: every row's holder (known to every process) and this
    process's own rows, keyed by `(group, row)`, rewards included."""

    holders: list[list[int]] = field(default_factory=list)
    rows: dict[tuple[int, int], GeneratedRow] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.holders)


@dataclass
class TrainedBatch:
    """This process's rows of the trained batch in batch order (each with its rewards), and how many carried rows
    each process trains (known to every process)."""

    local: list[GeneratedRow]
    carried_rows: list[int]

    @property
    def has_carried(self) -> bool:
        """Whether any process trains a carried row: the same on every process."""
        return any(self.carried_rows)


Exchange = Callable[[dict[int, list], list[int]], dict[int, list]]


def place_batch(
    carried: CarriedGroups,
    pool: GeneratedPool,
    trained: list[GroupRef],
    surplus: list[GroupRef],
    group_size: int,
    rows_per_process: int,
    num_processes: int,
    process: int,
    exchange: Exchange,
) -> tuple[TrainedBatch, CarriedGroups]:
    """This process's share of the trained batch (carried groups, then the `trained` fresh groups of `pool`) and
    the `surplus` groups it carries to the next batch."""
    holders = carried.holders + [[pool.holder(ref)] * group_size for ref in trained]
    plan = plan_exchange(holders, rows_per_process, num_processes)
    carry_holders = [[pool.holder(ref)] * group_size for ref in surplus]
    batch_groups = rows_per_process * num_processes // group_size
    carry_destinations = plan_carry_destinations(carry_holders, batch_groups, rows_per_process, num_processes)

    def own_row(key: tuple) -> GeneratedRow:
        kind, group, row = key
        if kind == "carried":
            return carried.rows[group, row]
        return pool.group(trained[group - len(carried)] if kind == "trained" else surplus[group])[row]

    def trained_key(group: int, row: int) -> tuple:
        return ("carried", group, row) if group < len(carried) else ("trained", group, row)

    moves = [(trained_key(group, row), source, target) for group, row, source, target in plan.moves(holders)]
    moves += [
        (("surplus", group, row), carry_holders[group][row], target)
        for group, targets in enumerate(carry_destinations)
        for row, target in enumerate(targets)
        if carry_holders[group][row] != target
    ]
    outgoing: dict[int, list] = {}
    for key, source, target in moves:
        if source == process:
            outgoing.setdefault(target, []).append(own_row(key))
    senders = sorted({source for _, source, target in moves if target == process})
    received = {source: iter(rows) for source, rows in exchange(outgoing, senders).items()}
    arrived = {key: next(received[source]) for key, source, target in moves if target == process}

    def row_here(key: tuple) -> GeneratedRow:
        return arrived[key] if key in arrived else own_row(key)

    at_position = {
        position: (group, row) for group, positions in enumerate(plan.positions) for row, position in enumerate(positions)
    }
    first = process * rows_per_process
    local = [row_here(trained_key(*at_position[position])) for position in range(first, first + rows_per_process)]
    next_carried = CarriedGroups(
        holders=carry_destinations,
        rows={
            (group, row): row_here(("surplus", group, row))
            for group, targets in enumerate(carry_destinations)
            for row, target in enumerate(targets)
            if target == process
        },
    )
    carried_rows = [0] * num_processes
    for positions in plan.positions[: len(carried)]:
        for position in positions:
            carried_rows[position // rows_per_process] += 1
    return TrainedBatch(local=local, carried_rows=carried_rows), next_carried
