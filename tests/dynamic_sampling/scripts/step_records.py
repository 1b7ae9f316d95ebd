"""Records, per rank and per step, what dynamic sampling generated, decided and trained, so that a test can recompute
the single-process decision from the rows and compare the ranks (tests/dynamic_sampling/trained_groups.py).

Used by the DeepSpeed and FSDP launch scripts: `recording_steps(trainer, steps)` wraps the sampler's `sample_batch`
and `log_step` and the sampler module's `call_order` (which rows of a round this rank generates), and appends one
record per step.
"""

from contextlib import contextmanager

import trl_variants.dynamic_sampling.sampler as sampler_module


def ids(row) -> list[list[int]]:
    return [list(row.prompt_ids), list(row.completion_ids)]


@contextmanager
def recording_steps(trainer, steps: list[dict]):
    """While open, every training step of `trainer` appends to `steps` this rank's record of it (nothing for a
    trainer without dynamic sampling)."""
    sampler = getattr(trainer, "dynamic_sampler", None)
    if sampler is None:
        yield steps
        return
    sample_batch, log_step, call_order = sampler.sample_batch, sampler.log_step, sampler_module.call_order
    rank, num_processes = trainer.accelerator.process_index, trainer.accelerator.num_processes
    own: list[int] = []  # generation-order numbers of the rows this rank generated in the current step
    step: dict = {}

    def recording_call_order(segment_lengths, processes):
        order = call_order(segment_lengths, processes)
        share = len(order) // num_processes
        offset = sum(step.get("round_rows", []))
        own.extend(offset + number for number in order[rank * share : (rank + 1) * share])
        step.setdefault("round_rows", []).append(len(order))
        return order

    def recording_log_step(groups, generated, scores, informative, decision, rounds, carried_groups):
        rows = [row for group in groups for row in group]
        step.update(
            global_step=trainer.state.global_step,
            # Every row of the step, in generation order, as every rank holds it; `own`: the ones this rank generated.
            generated=[ids(row) for row in rows],
            rewards=[list(row.rewards) for row in rows],
            own=list(own),
            carried_groups=carried_groups,
            selected=decision.trained,
            surplus=decision.carried,
        )
        return log_step(groups, generated, scores, informative, decision, rounds, carried_groups)

    def recording_sample_batch(inputs, trl_generate_and_score):
        own.clear()
        step.clear()
        batch = sample_batch(inputs, trl_generate_and_score)
        step.pop("round_rows", None)
        steps.append(
            {
                **step,
                "carried_in": batch.carried_rows[rank],
                "trained": [ids(row) for row in batch.local],
                "carried_out": [ids(row) for group in sampler.carried for row in group],
            }
        )
        return batch

    sampler.sample_batch, sampler.log_step = recording_sample_batch, recording_log_step
    sampler_module.call_order = recording_call_order
    try:
        yield steps
    finally:
        sampler.sample_batch, sampler.log_step = sample_batch, log_step
        sampler_module.call_order = call_order
