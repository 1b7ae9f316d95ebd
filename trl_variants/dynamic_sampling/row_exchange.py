"""Carries out the row exchange that `exchange.plan_exchange` plans: point-to-point messages between the processes
that exchange rows, nothing between the others.

Every process computes the same plan, so each knows which processes it sends to and receives from and which rows
the messages hold; only the payload's size has to precede it. Rows are pickled (they are plain records whose
fields, tensors included, pickle as they are), so extra per-row fields travel unchanged.

With NCCL, `batch_isend_irecv` needs every rank in its first call on a group; here the group has always run
collectives before (the counts gathered in phase 1), so processes that exchange nothing may stay out.
"""

import pickle

import torch
import torch.distributed as dist


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
