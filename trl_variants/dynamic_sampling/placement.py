"""The row exchange: which process generates which row of a round, and, after the keep/drop decision, which process
trains each selected group and the rows that move there. Free of trainer state; `exchange_objects` alone runs
collectives.

Generation (`call_order`). A call is one or more *segments* of rows (the dataloader's batch, refill prompts), each
split evenly over the processes: process `p` generates the `p`-th share of every segment. The rows are numbered in
*generation order*, the segments one after the other; TRL's gathers return them in *process order*, process 0's
rows first.

The plan (`plan_exchange`). Every process generates its own share of each round and keeps its rows. Once the shared
decision has picked the groups to train, the global batch is laid out as TRL expects it: `num_processes *
rows_per_process` rows, groups contiguous, process `p` training rows `[p * rows_per_process, (p + 1) *
rows_per_process)`. Group `k` of the batch fills the *slot* of rows `[k * G, (k + 1) * G)`. The plan chooses which
group fills which slot, and which of a group's rows goes to which of the slot's rows, so that as few rows as
possible change process. The trained groups are exactly the selected ones; only where they are trained changes.
Advantages are normalised per group, and the loss of `loss_type` "dapo", "dr_grpo" and "grpo" sums over rows (with
a global or a per-row normaliser), so the step's loss does not depend on which process trains which group.

The batch (`place_batch`). The groups trained are the carried groups then the chosen fresh ones, as the decision
picked them (`selection.decide_round`): every process knows which process holds each, not its rows. Carried groups
are sent now to the process that will train them next step (`plan_carry_destinations`). Both moves go in one
exchange; a row that moves takes its rewards with it.

The messages (`exchange_objects`): point-to-point messages between the processes that exchange rows, nothing
between the others. Every process computes the same plan, so each knows which processes it sends to and receives
from and which rows the messages hold; only the payload's size has to precede it. Rows are pickled (plain records
whose fields, tensors included, pickle as they are), so extra per-row fields travel unchanged. With NCCL,
`batch_isend_irecv` needs every rank in its first call on a group; here the group has always run collectives before
(the counts gathered in phase 1), so processes that exchange nothing may stay out.
"""

import pickle
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .selection import GroupRef, Share, local_position


@dataclass
class GeneratedRow:
    """One generated completion with everything needed to replay it into TRL's scoring pass, its rewards included
    (one per reward function, as TRL's `_calculate_rewards` returns them). A plain picklable record: rows that
    change process are pickled whole, so rewards and extra per-row fields travel with them."""

    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    logprobs: list[float] | None
    extra: dict = field(default_factory=dict)
    extra_logs: dict = field(default_factory=dict)
    # Log-probs under the policy that generated the row, recorded only for a row carried to the next batch.
    generating_logps: torch.Tensor | None = None
    # With tools: the completion before TRL's tool loop, the loop's result and this row's tool-call counts
    # (trl_hooks.py).
    tool_rollout: dict | None = None
    # With environment_factory: the prompt TRL generated from, the environment's observation appended.
    generation_prompt: list | str | None = None
    # Plain floats, not a tensor: a pickled tensor costs some 400 bytes, a list of floats a few per value.
    rewards: list[float] | None = None


@dataclass
class OwnShare:
    """This process's groups of one share, their sampling scores `(groups, G)` and informative flags."""

    groups: list[list[GeneratedRow]]
    scores: torch.Tensor
    informative: list[bool]


@dataclass
class GeneratedPool:
    """A step's generated groups: every share (known to every process once its round is counted), this process's
    own shares by share number and, with prompt skipping, every group's outcome summary in generation order."""

    shares: list[Share] = field(default_factory=list)
    own: dict[int, OwnShare] = field(default_factory=dict)
    outcomes: list[torch.Tensor] = field(default_factory=list)

    @property
    def groups(self) -> int:
        return sum(share.groups for share in self.shares)

    @property
    def informative_groups(self) -> int:
        return sum(share.informative for share in self.shares)

    def holder(self, ref: GroupRef) -> int:
        return self.shares[ref.share].process

    def group(self, ref: GroupRef) -> list[GeneratedRow]:
        """The rows of one of this process's groups."""
        own = self.own[ref.share]
        return own.groups[local_position(own.informative, ref)]

    def local_rows(self) -> list[GeneratedRow]:
        return [row for own in self.own.values() for group in own.groups for row in group]


def call_order(segment_lengths: list[int], num_processes: int) -> list[int]:
    """The generation-order number of each row of a call, in process order.

    Process `p` generates the rows `order[p * n : (p + 1) * n]`, `n = sum(segment_lengths) // num_processes`; with a
    single segment the order is the identity, as when every process takes its contiguous share of one list.
    """
    if num_processes < 1:
        raise ValueError(f"call_order: num_processes must be >= 1, got {num_processes}.")
    uneven = [length for length in segment_lengths if length < 0 or length % num_processes]
    if uneven:
        raise ValueError(
            f"call_order: every segment must split evenly over {num_processes} processes, got lengths "
            f"{segment_lengths}."
        )
    starts = [sum(segment_lengths[:i]) for i in range(len(segment_lengths))]
    order = []
    for process in range(num_processes):
        for start, length in zip(starts, segment_lengths, strict=True):
            share = length // num_processes
            order.extend(range(start + process * share, start + (process + 1) * share))
    return order


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
    pool,
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

    def own_row(key: tuple) :
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

    def row_here(key: tuple) :
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


def _run(ops: list) -> None:
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def exchange_objects(outgoing: dict[int, object], incoming_from: list[int], device: torch.device) -> dict[int, object]:
    """Sends `outgoing[process]` to each process and returns the object received from each of `incoming_from`.

    Two rounds of point-to-point messages: the payload sizes (one int64 each), then the pickled payloads. Tensors
    live on `device`, which must suit the backend (a GPU for NCCL, the CPU for gloo).
    """
    if not outgoing and not incoming_from:
        return {}
    payloads = {
        process: torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
        for process, obj in outgoing.items()
    }
    sent_sizes = {
        process: torch.tensor([payload.numel()], dtype=torch.int64, device=device) for process, payload in payloads.items()
    }
    received_sizes = {process: torch.zeros(1, dtype=torch.int64, device=device) for process in incoming_from}
    _run(
        [dist.P2POp(dist.isend, size, process) for process, size in sent_sizes.items()]
        + [dist.P2POp(dist.irecv, size, process) for process, size in received_sizes.items()]
    )
    sent = {process: payload.to(device) for process, payload in payloads.items()}
    received = {
        process: torch.empty(int(size.item()), dtype=torch.uint8, device=device)
        for process, size in received_sizes.items()
    }
    _run(
        [dist.P2POp(dist.isend, payload, process) for process, payload in sent.items()]
        + [dist.P2POp(dist.irecv, buffer, process) for process, buffer in received.items()]
    )
    return {process: pickle.loads(buffer.cpu().numpy().tobytes()) for process, buffer in received.items()}
