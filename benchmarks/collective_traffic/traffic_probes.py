"""The instruments of `collective_traffic.py`, in each torchrun process: bytes arriving through
`torch.distributed`'s Python collectives (`Traffic`), and the peak payload of live generated-row records
(`RowMemory`). What they count is described in `collective_traffic.py`'s docstring."""

import pickle
import weakref

import torch


class Traffic:
    """Bytes arriving at this process through `torch.distributed`'s Python collectives."""

    def __init__(self, on_call):
        self.bytes, self.calls, self.on_call = 0, 0, on_call

    def add(self, nbytes: int) -> None:
        self.bytes += int(nbytes)
        self.calls += 1
        self.on_call()

    def install(self) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        def size(tensors):
            return sum(t.numel() * t.element_size() for t in tensors)

        def rank():
            return dist.get_rank()

        def received(name, original):
            def all_gather(tensor_list, tensor, *args, **kwargs):
                result = original(tensor_list, tensor, *args, **kwargs)
                self.add(size(tensor_list) - size([tensor]))
                return result

            def all_gather_into_tensor(output, tensor, *args, **kwargs):
                result = original(output, tensor, *args, **kwargs)
                self.add(size([output]) - size([tensor]))
                return result

            def all_reduce(tensor, *args, **kwargs):
                result = original(tensor, *args, **kwargs)
                self.add(size([tensor]))
                return result

            def broadcast(tensor, src=None, *args, **kwargs):
                result = original(tensor, src, *args, **kwargs)
                self.add(0 if src == rank() else size([tensor]))
                return result

            def reduce(tensor, dst=None, *args, **kwargs):
                result = original(tensor, dst, *args, **kwargs)
                self.add(size([tensor]) if dst == rank() else 0)
                return result

            def gather(tensor, gather_list=None, *args, **kwargs):
                result = original(tensor, gather_list, *args, **kwargs)
                self.add(size(gather_list) - size([tensor]) if gather_list else 0)
                return result

            def scatter(tensor, *args, **kwargs):
                result = original(tensor, *args, **kwargs)
                self.add(size([tensor]))
                return result

            def all_to_all(output_tensor_list, input_tensor_list, *args, **kwargs):
                result = original(output_tensor_list, input_tensor_list, *args, **kwargs)
                self.add(size(output_tensor_list) - size([output_tensor_list[rank()]]))
                return result

            def batch_isend_irecv(p2p_op_list):
                # Receive buffers are sized before the data arrives; the caller waits (a second wait on a gloo
                # receive would wait for another message).
                result = original(p2p_op_list)
                self.add(size([op.tensor for op in p2p_op_list if op.op.__name__ == "irecv"]))
                return result

            return locals()[name]

        for name in ("all_gather", "all_gather_into_tensor", "all_reduce", "broadcast", "reduce", "gather",
                     "scatter", "all_to_all", "batch_isend_irecv"):  # fmt: skip
            wrapper = received(name, getattr(c10d, name))
            setattr(c10d, name, wrapper)
            setattr(dist, name, wrapper)


class RowMemory:
    """Peak payload of the live `GeneratedRow`s of this process."""

    def __init__(self):
        self.live: dict[int, weakref.ref] = {}  # by id: a dataclass with eq=True is unhashable
        self.peak_bytes = self.peak_rows = 0

    def track(self, row_class) -> None:
        live = self.live

        def tracking_new(cls, *args, **kwargs):
            row = object.__new__(cls)
            key = id(row)
            live[key] = weakref.ref(row, lambda _, key=key: live.pop(key, None))
            return row

        row_class.__new__ = tracking_new

    @staticmethod
    def payload(row) -> int:
        ids = len(row.prompt_ids) + len(row.completion_ids) + len(row.logprobs or []) + len(row.tool_mask or [])
        # Rows hold their rewards as floats (older versions: none, or a tensor); generating log-probs as a tensor.
        rewards = getattr(row, "rewards", None)
        tensors = [t for t in (rewards, row.generating_logps) if isinstance(t, torch.Tensor)]
        tensors = sum(t.numel() * t.element_size() for t in tensors) + (8 * len(rewards) if isinstance(rewards, list) else 0)
        extra = len(pickle.dumps((row.row, row.extra, row.extra_logs)))
        return 8 * ids + tensors + extra

    def sample(self) -> None:
        rows = [row for row in (ref() for ref in list(self.live.values())) if row is not None]
        self.peak_rows = max(self.peak_rows, len(rows))
        self.peak_bytes = max(self.peak_bytes, sum(self.payload(row) for row in rows))

    def reset(self) -> None:
        self.peak_bytes = self.peak_rows = 0
