"""The keep/drop decision from counts: which process holds each group the decision trains or carries, free of any
collective so it can be tested on its own.

Phase 1 keeps every group whole on the process that generated it: a generation segment (the dataloader's batch, a
refill round) is split over the processes in contiguous shares of whole groups, so the segment's groups in
generation order are process 0's share, then process 1's, and so on. Each process scores only its own rows and
knows only its own groups' informative flags. What the decision needs from the others is one count per *share*
(a process's part of one segment): how many of its groups are informative. The share's size is known to all.

The decision's rules (`selection.select_groups`: the first `needed` informative groups in generation order, then
with `fill` the earliest degenerate ones; `carry.plan_carry`: the earliest surplus informative groups up to the
capacity) depend on the order of groups only through which share each falls in: inside a share, the k-th group
selected is that share's k-th informative (or degenerate) group. So every process applies the rules to
`share_flags`, which lists each share's informative groups before its degenerate ones, and gets the same shares,
counts and order as the rules would on the true flags; `group_ref` names a chosen group by share, kind and ordinal,
which the holder alone resolves to one of its groups (`local_position`).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """One process's contiguous part of one generation segment: `groups` whole groups, `informative` of them
    informative."""

    process: int
    groups: int
    informative: int

    def __post_init__(self):
        if self.process < 0 or not 0 <= self.informative <= self.groups:
            raise ValueError(
                f"Share: need process >= 0 and 0 <= informative <= groups, got process={self.process}, "
                f"groups={self.groups}, informative={self.informative}."
            )


@dataclass(frozen=True)
class GroupRef:
    """The `ordinal`-th informative (or degenerate) group of share `share`, in the holder's generation order."""

    share: int
    informative: bool
    ordinal: int


def share_flags(shares: list[Share]) -> list[bool]:
    """Informative flags in share order, each share's informative groups first: equal to the true flags up to the
    order inside each share, which the decision's rules do not depend on (see the module docstring)."""
    return [flag for share in shares for flag in [True] * share.informative + [False] * (share.groups - share.informative)]


def group_ref(shares: list[Share], index: int) -> GroupRef:
    """The group at position `index` of `share_flags(shares)`."""
    if index < 0:
        raise ValueError(f"group_ref: index must be >= 0, got {index}.")
    start = 0
    for number, share in enumerate(shares):
        if index < start + share.groups:
            offset = index - start
            if offset < share.informative:
                return GroupRef(number, True, offset)
            return GroupRef(number, False, offset - share.informative)
        start += share.groups
    raise ValueError(f"group_ref: index {index} is beyond the {start} groups of the shares.")


def local_position(flags: list[bool], ref: GroupRef) -> int:
    """Position, in its holder's share, of the group `ref` names, given the share's true informative `flags`."""
    positions = [position for position, flag in enumerate(flags) if flag == ref.informative]
    if ref.ordinal >= len(positions):
        kind = "informative" if ref.informative else "degenerate"
        raise ValueError(f"local_position: the share has {len(positions)} {kind} groups, not {ref.ordinal + 1}.")
    return positions[ref.ordinal]


def segment_shares(groups_per_share: int, counts: list[int]) -> list[Share]:
    """A segment's shares from every process's informative count (process order)."""
    return [Share(process, groups_per_share, count) for process, count in enumerate(counts)]
