"""How many rows the row exchange moves per process and step as the number of processes grows, without a model.

    python -m benchmarks.collective_traffic.exchange_simulation [--processes 2 4 8 16 64] [--pass-rates 0.3 0.5 0.7]
        [--runs 20] [--steps 100] [--output benchmarks/collective_traffic/results/exchange_simulation.md]

Every step, each process's groups are informative with probability q, independently. The step is then decided by
the package's own functions, as `DynamicSampler.sample_batch` composes them: the first round's
size (`selection.first_round_extra_groups_after_carry`), the round's generation calls (`DynamicSampler
.round_calls`, the plain-`generate` path the benchmarks run) and their shares (`selection.segment_shares`), the
refill rounds (`selection.groups_to_request`, up to `dynamic_sampling_max_rounds`), the selection
(`selection.select_groups` on `selection.share_flags`, `dynamic_sampling_on_exhausted="fill"`), the surplus carried
(`selection.plan_carry`), the pass-rate estimate (`selection.PassRateTracker`) and the plan of the exchange
(`placement.plan_exchange`, `placement.plan_carry_destinations`). The glue mirrored here is that method's loop and
the three lines of `placement.place_batch` that list each group's holders and count the rows that change process.

Per step it records the rows the exchange moves (trained and carried rows that change process), divided by the
number of processes; the figure is the mean over `--steps` consecutive steps of one run (the pass-rate estimate and
the carried groups link the steps), and the interval a 95% t-interval over `--runs` independent runs. Beside it,
a lower bound that any plan keeping the same selection obeys when every group is whole on one process and every
process trains whole groups: process p holds `h_p` of the trained groups where they were generated (a carried group
counting at its generator, as if never moved before it is trained) and trains `s` groups, so at least
`G * max(0, h_p - s)` of its rows leave it in the step that trains them.
"""

import argparse
import random
import statistics
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from benchmarks.shared.output import command_line
from benchmarks.shared.stats import t_interval
from trl_variants.dynamic_sampling.placement import plan_carry_destinations, plan_exchange
from trl_variants.dynamic_sampling.sampler import DynamicSampler
from trl_variants.dynamic_sampling.selection import (
    PassRateTracker,
    first_round_extra_groups_after_carry,
    group_ref,
    groups_to_request,
    plan_carry,
    segment_shares,
    select_groups,
    share_flags,
)

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "exchange_simulation.md"
GROUP_SIZE = 4
MAX_ROUNDS = 4  # DAPOConfig's default dynamic_sampling_max_rounds


def sampler_view(processes: int, rows_per_process: int) -> DynamicSampler:
    """A sampler whose trainer has what `DynamicSampler.round_calls` and `groups_split_over_processes` read."""
    sampler = object.__new__(DynamicSampler)
    sampler.trainer = SimpleNamespace(
        use_vllm=False, num_generations=GROUP_SIZE, accelerator=SimpleNamespace(num_processes=processes),
        args=SimpleNamespace(per_device_train_batch_size=rows_per_process, steps_per_generation=1),
    )  # fmt: skip
    return sampler


class Run:
    """One training run's chain of steps on `processes` processes."""

    def __init__(self, processes: int, rows_per_process: int, pass_rate: float, carry: bool, rng: random.Random):
        self.processes, self.rows_per_process, self.q, self.carry, self.rng = (
            processes, rows_per_process, pass_rate, carry, rng,
        )  # fmt: skip
        self.view = sampler_view(processes, rows_per_process)
        self.tracker = PassRateTracker()
        self.carried = []  # each carried group's rows' holders, as `CarriedGroups.holders`
        self.carried_generators = []  # the process that generated each carried group

    def step(self) -> tuple[int, int]:
        """Rows moved this step and the lower bound, both summed over processes."""
        processes, group_size = self.processes, GROUP_SIZE
        batch_rows = processes * self.rows_per_process
        batch_groups = batch_rows // group_size
        needed = batch_groups - len(self.carried)
        extra = first_round_extra_groups_after_carry(batch_groups, len(self.carried), self.tracker.estimate, processes)
        if self.view.groups_split_over_processes:
            extra += -(batch_groups + extra) % processes
            segments = [[None] * (batch_rows + extra * group_size)]
        else:
            segments = [[None] * batch_rows, [None] * (extra * group_size)]
        shares, rounds = [], 0
        while True:
            rounds += 1
            for call in self.view.round_calls(segments, batch_rows):
                for segment in call:
                    per_share = len(segment) // group_size // processes
                    counts = [sum(self.rng.random() < self.q for _ in range(per_share)) for _ in range(processes)]
                    shares.extend(segment_shares(per_share, counts))
            found, seen = sum(s.informative for s in shares), sum(s.groups for s in shares)
            if found >= needed or rounds >= MAX_ROUNDS:
                break
            request = groups_to_request(needed - found, found / seen, batch_groups, processes)
            segments = [[None] * (request * group_size)]
        flags = share_flags(shares)
        selection = select_groups(flags, needed, fill=True)
        surplus = plan_carry(flags, selection.indices, batch_groups if self.carry else 0)
        self.tracker.update(found, seen)

        # As `placement.place_batch` lists the holders and the rows that change process.
        trained = [shares[group_ref(shares, i).share].process for i in selection.indices]
        holders = self.carried + [[process] * group_size for process in trained]
        moved = len(plan_exchange(holders, self.rows_per_process, processes).moves(holders))
        carry_generators = [shares[group_ref(shares, i).share].process for i in surplus.carried]
        carry_holders = [[process] * group_size for process in carry_generators]
        destinations = plan_carry_destinations(carry_holders, batch_groups, self.rows_per_process, processes)
        moved += sum(h != d for hs, ds in zip(carry_holders, destinations) for h, d in zip(hs, ds))

        slots = self.rows_per_process // group_size
        held = Counter(self.carried_generators + trained)
        bound = group_size * sum(max(0, count - slots) for count in held.values())
        self.carried, self.carried_generators = destinations, carry_generators
        return moved, bound


def simulate(processes, rows_per_process, pass_rate, carry, runs, steps, seed=0):
    """Per run, moved rows and lower bound per process and step (means over the run's steps)."""
    moved_means, bound_means = [], []
    for run_number in range(runs):
        rng = random.Random(f"{seed}/{processes}/{rows_per_process}/{pass_rate}/{carry}/{run_number}")
        run = Run(processes, rows_per_process, pass_rate, carry, rng)
        results = [run.step() for _ in range(steps)]
        moved_means.append(statistics.fmean(m for m, _ in results) / processes)
        bound_means.append(statistics.fmean(b for _, b in results) / processes)
    return t_interval(moved_means), t_interval(bound_means)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4, 8, 16, 64])
    parser.add_argument("--pass-rates", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--rows-per-process", type=int, nargs="+", default=[16, 6])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    lines = [
        "# Rows moved by the row exchange per process and step, simulated",
        "",
        f"Written by `{command_line(__spec__.name)}` (no model: each group informative with probability q; "
        f"the package's own decision and exchange plan; groups of {GROUP_SIZE}; {args.runs} runs of {args.steps} "
        "steps each; mean over runs with its 95% t-interval). Rows per process: trained rows per process and step "
        f"(6 is not a multiple of the group size: groups straddle processes, and the lower bound, which assumes whole "
        "groups per process, is not shown). Moved: trained and carried rows that change process.",
        "",
        "| rows / process | q | carrying | processes | moved rows / step / process | lower bound |",
        "|---|---|---|---|---|---|",
    ]
    for rows_per_process in args.rows_per_process:
        for pass_rate in args.pass_rates:
            for carry in (False, True):
                for processes in args.processes:
                    if processes * rows_per_process % GROUP_SIZE:
                        continue
                    moved, bound = simulate(processes, rows_per_process, pass_rate, carry, args.runs, args.steps)
                    bound_text = bound.text(2) if rows_per_process % GROUP_SIZE == 0 else "-"
                    line = (
                        f"| {rows_per_process} | {pass_rate} | {'on' if carry else 'off'} | {processes} | "
                        f"{moved.text(2)} | {bound_text} |"
                    )
                    print(line, flush=True)
                    lines.append(line)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
