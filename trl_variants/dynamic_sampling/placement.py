"""After the keep/drop decision: lays the trained batch out over the processes and moves the rows that must move.

The groups trained are the carried groups then the selected fresh ones, as the decision picked them; the plan
(`exchange.plan_exchange`) chooses which process trains each, keeping rows where they are as far as it can. Carried
groups are sent now to the process that will train them next step (`exchange.plan_carry_destinations`). Both moves
go in one exchange, through the `exchange` callable (`row_exchange.exchange_objects` in training).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .exchange import plan_carry_destinations, plan_exchange
from .rounds import GeneratedPool, GeneratedRow


@dataclass
class CarriedGroups:
    """Surplus informative groups carried to the next batch: every row's holder and rewards (known to every
    process) and this process's own rows, keyed by `(group, row)`."""

    holders: list[list[int]] = field(default_factory=list)
    rewards: torch.Tensor | None = None
    rows: dict[tuple[int, int], GeneratedRow] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.holders)


@dataclass
class TrainedBatch:
    """This process's rows of the trained batch in batch order, and every row's rewards in global batch order
    (TRL normalises advantages over the gathered rewards and slices out each process's rows)."""

    local: list[GeneratedRow]
    rewards: torch.Tensor
    has_carried: bool


Exchange = Callable[[dict[int, list], list[int]], dict[int, list]]


def place_batch(
    carried: CarriedGroups,
    pool: GeneratedPool,
    selected: list[int],
    surplus: list[int],
    group_size: int,
    rows_per_process: int,
    num_processes: int,
    process: int,
    exchange: Exchange,
) -> tuple[TrainedBatch, CarriedGroups]:
    """This process's share of the trained batch (carried groups, then the `selected` fresh groups of `pool`) and
    the `surplus` groups it carries to the next batch."""
    fresh_holders = [[pool.holders[group * group_size + row] for row in range(group_size)] for group in selected]
    holders = carried.holders + fresh_holders
    plan = plan_exchange(holders, rows_per_process, num_processes)
    carry_holders = [[pool.holders[group * group_size + row] for row in range(group_size)] for group in surplus]
    batch_groups = rows_per_process * num_processes // group_size
    carry_destinations = plan_carry_destinations(carry_holders, batch_groups, rows_per_process, num_processes)

    def own_row(key: tuple) -> GeneratedRow:
        kind, group, row = key
        if kind == "carried":
            return carried.rows[group, row]
        number = (selected[group - len(carried)] if kind == "trained" else surplus[group]) * group_size + row
        return pool.local[number]

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

    pool_rewards = pool.all_rewards()
    at_position = {}
    for group, positions in enumerate(plan.positions):
        for row, position in enumerate(positions):
            at_position[position] = (group, row)
    local, rewards = [], []
    for position in range(rows_per_process * num_processes):
        group, row = at_position[position]
        if group < len(carried):
            rewards.append(carried.rewards[group * group_size + row])
        else:
            rewards.append(pool_rewards[selected[group - len(carried)] * group_size + row])
        if position // rows_per_process == process:
            local.append(row_here(trained_key(group, row)))

    carried_rewards = [pool_rewards[group * group_size + row] for group in surplus for row in range(group_size)]
    next_carried = CarriedGroups(
        holders=carry_destinations,
        rewards=torch.stack(carried_rewards) if carried_rewards else None,
        rows={
            (group, row): row_here(("surplus", group, row))
            for group, targets in enumerate(carry_destinations)
            for row, target in enumerate(targets)
            if target == process
        },
    )
    return TrainedBatch(local=local, rewards=torch.stack(rewards), has_carried=len(carried) > 0), next_carried
