"""Records, per rank and per step, what dynamic sampling generated, decided and trained, so that a test can put the
ranks' records together and recompute the single-process decision (tests/dynamic_sampling/trained_groups.py).

Used by the torchrun and DeepSpeed launch scripts: `recording_steps(trainer, steps)` wraps the sampler module's
`place_batch`, where the decision's groups are laid out over the processes, and appends one record per step.
"""

from contextlib import contextmanager

import trl_variants.dynamic_sampling.sampler as sampling_trainer
from trl_variants.dynamic_sampling.selection import local_position


def generation_index(pool, ref) -> int:
    """The generation-order number of one of this rank's groups."""
    start = sum(share.groups for share in pool.shares[: ref.share])
    return start + local_position(pool.own[ref.share].informative, ref)


def ids(row) -> list[list[int]]:
    return [list(row.prompt_ids), list(row.completion_ids)]


@contextmanager
def recording_steps(trainer, steps: list[dict]):
    """While open, every training step of `trainer` appends to `steps` this rank's record of it."""
    place_batch = sampling_trainer.place_batch

    def recording_place_batch(carried, pool, trained, surplus, *args):
        batch, next_carried = place_batch(carried, pool, trained, surplus, *args)
        rank, group_size = trainer.accelerator.process_index, trainer.num_generations

        def held_here(refs) -> dict[int, int]:
            return {i: generation_index(pool, ref) for i, ref in enumerate(refs) if pool.holder(ref) == rank}

        generated, rewards = {}, {}
        for share, own in pool.own.items():
            start = sum(earlier.groups for earlier in pool.shares[:share])
            for position, group in enumerate(own.groups):
                for row_number, row in enumerate(group):
                    number = (start + position) * group_size + row_number
                    generated[number], rewards[number] = ids(row), list(row.rewards)
        steps.append(
            {
                "global_step": trainer.state.global_step,
                "shares": [[share.process, share.groups, share.informative] for share in pool.shares],
                # This rank's own rows only, by generation-order number: no rank knows another's rewards.
                "rewards": rewards,
                "generated": generated,
                "carried_groups": len(carried),
                "carried_in": len(carried.rows),
                # The chosen groups this rank holds: position in the decision's list -> generation-order group.
                "selected": held_here(trained),
                "surplus": held_here(surplus),
                "trained": [ids(row) for row in batch.local],
                "carried_out": [ids(row) for row in next_carried.rows.values()],
                "carried_out_rewards": [list(row.rewards) for row in next_carried.rows.values()],
            }
        )
        return batch, next_carried

    sampling_trainer.place_batch = recording_place_batch
    try:
        yield steps
    finally:
        sampling_trainer.place_batch = place_batch
