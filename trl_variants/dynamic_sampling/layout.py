"""Which process generates which row of a generation call, free of any trainer state.

A call is one or more *segments* of rows (the dataloader's batch, refill prompts), each split evenly over the
processes: process `p` generates the `p`-th share of every segment. The rows are numbered in *generation order*,
the segments one after the other; TRL's gathers return them in *process order*, process 0's rows first.
"""


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
