"""What a step should cost each arm of the GPU-speed study, predicted from a curve of `generate` time against rows.

    python -m benchmarks.gpu_speed.cost_model [--curve ROWS:SECONDS ... | --curve-json PATH] [--steps 4000]

Pure functions but `main`. A step's generation is simulated with the package's own round sizing
(`selection.first_round_extra_groups`, `groups_to_request`, `PassRateTracker`, `selection.decide_round`,
`generate_calls.plan_calls`): each round's informative groups are drawn from a binomial at the workload's expected
informative share (prompts are drawn independently, so a group is informative with that probability whatever its
prompt), and each round goes to `generate` in the calls `plan_calls` makes of it. A call of `rows` rows costs what
the curve says (piecewise linear between its points, the nearest segment's line outside them). The rest of a step
(scoring, log-probs, backward) trains the same rows in every arm and is one number, `other_s_per_step` (0 by
default: the prediction is then generation only, and every ratio is further from 1 than a real step's).

Predicted per arm: seconds per step, `generate` calls and rows per step, informative rows per step, seconds per
informative row and its ratio to `GRPOTrainer`, which generates one generation batch in one call and trains every
group, informative or not. These are predictions, to be checked by the GPU study (run.py).

`first_round_saving` asks whether a larger first round, fewer second rounds, would pay: it scans the first round's
margin over the pass-rate estimate (the package uses `REFILL_MARGIN`) and gives the best predicted saving of step
time.
"""

import argparse
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from trl_variants.dynamic_sampling.selection import decide_round, first_round_extra_groups
from trl_variants.dynamic_sampling.generate_calls import plan_calls
from trl_variants.dynamic_sampling.selection import REFILL_MARGIN, PassRateTracker, groups_to_request


@dataclass(frozen=True)
class GenerateCurve:
    """Seconds of one `generate` call against its rows, at the points measured."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        if len(self.rows) < 2 or len(self.rows) != len(self.seconds) or list(self.rows) != sorted(set(self.rows)):
            raise ValueError(
                f"GenerateCurve: rows {self.rows} must be at least two increasing counts, one per seconds value "
                f"{self.seconds}."
            )
        if min(self.rows) < 1 or min(self.seconds) <= 0:
            raise ValueError(f"GenerateCurve: rows {self.rows} and seconds {self.seconds} must be positive.")

    def call_seconds(self, rows: int) -> float:
        """Piecewise linear in rows; outside the points, the nearest segment's line (never below 0)."""
        segment = next((i for i in range(len(self.rows) - 1) if rows <= self.rows[i + 1]), len(self.rows) - 2)
        (x0, x1), (y0, y1) = self.rows[segment : segment + 2], self.seconds[segment : segment + 2]
        return max(0.0, y0 + (y1 - y0) * (rows - x0) / (x1 - x0))


# Issue 31, one NVIDIA H200, SmolLM2-360M shape with random weights, bf16, 256 new tokens: one call each.
H200_360M = GenerateCurve(rows=(128, 384, 768), seconds=(18.6, 20.1, 27.7))


def linear_curve(rows: int, seconds: float) -> GenerateCurve:
    """A call's time proportional to its rows, through `seconds` at `rows` (compute-bound decoding, as on a CPU)."""
    return GenerateCurve(rows=(rows, 2 * rows), seconds=(seconds, 2 * seconds))


@dataclass(frozen=True)
class StudyShape:
    """One process's step in the study: `batch_groups` groups of `group_size` trained per generation batch (one
    generation batch per optimizer step), a group informative with probability `informative_share`."""

    batch_groups: int = 16
    group_size: int = 8
    informative_share: float = 0.5
    max_rounds: int = 4
    max_rows_per_call: int | None = None
    other_s_per_step: float = 0.0


@dataclass(frozen=True)
class Prediction:
    arm: str
    s_per_step: float
    calls_per_step: float
    rows_per_step: float
    informative_rows_per_step: float
    second_round_share: float

    @property
    def s_per_informative_row(self) -> float:
        return self.s_per_step / self.informative_rows_per_step


# The saving of step time that would justify sizing first rounds by the cost model (issue 42).
DECISIVE_SAVING = 0.10
ARMS = {"grpo": None, "dapo_as_published": False, "dapo_defaults": True}  # arm: carrying (None: no rounds)


def round_calls_seconds(curve: GenerateCurve, groups: int, shape: StudyShape) -> tuple[int, float]:
    """The `generate` calls of a round of `groups` groups and their seconds."""
    calls = plan_calls(groups * shape.group_size, shape.group_size, shape.max_rows_per_call)
    return len(calls), sum(curve.call_seconds(stop - start) for start, stop in calls)


def binomial(rng: random.Random, trials: int, probability: float) -> int:
    return sum(rng.random() < probability for _ in range(trials))


def first_round_groups(shape: StudyShape, carried: int, estimate: float | None, margin: float | None) -> int:
    """The first round: the dataloader's groups plus what the package's sizing asks (`margin=None`), or the groups
    that `margin` times the groups still needed over the pass-rate estimate make."""
    batch = shape.batch_groups
    if margin is None:
        return batch + first_round_extra_groups(batch, carried, estimate, 1)
    needed = batch - carried
    if estimate is None or estimate >= 1 or needed == 0:
        return batch
    return max(batch, min(math.ceil(needed / estimate * margin), 4 * batch))


def predict(arm: str, curve: GenerateCurve, shape: StudyShape, steps: int = 4000, seed: int = 0,
            first_round_margin: float | None = None) -> Prediction:  # fmt: skip
    """The mean over `steps` simulated steps of `arm` (a key of `ARMS`)."""
    if arm not in ARMS:
        raise ValueError(f"predict: arm {arm!r} is not one of {list(ARMS)}.")
    batch, size = shape.batch_groups, shape.group_size
    if ARMS[arm] is None:
        calls, seconds = round_calls_seconds(curve, batch, shape)
        return Prediction(arm, seconds + shape.other_s_per_step, calls, batch * size,
                          batch * size * shape.informative_share, 0.0)  # fmt: skip
    rng, tracker, carried = random.Random(seed), PassRateTracker(), 0
    totals = dict(seconds=0.0, calls=0, rows=0, informative=0, second=0)
    for _ in range(steps):
        needed = batch - carried
        rounds = [first_round_groups(shape, carried, tracker.estimate, first_round_margin)]
        found, seen = binomial(rng, rounds[0], shape.informative_share), rounds[0]
        while found < needed and len(rounds) < shape.max_rounds:
            rounds.append(groups_to_request(needed - found, found / seen, batch, 1))
            found += binomial(rng, rounds[-1], shape.informative_share)
            seen += rounds[-1]
        tracker.update(found, seen)
        # The order of the flags does not matter to the counts.
        decision = decide_round([True] * found, needed, fill=False, carry_capacity=batch if ARMS[arm] else 0)
        totals["informative"] += (len(decision.kept) + carried) * size
        next_carried = len(decision.carried)
        carried = next_carried
        for groups in rounds:
            calls, seconds = round_calls_seconds(curve, groups, shape)
            totals["calls"] += calls
            totals["seconds"] += seconds
            totals["rows"] += groups * size
        totals["second"] += len(rounds) > 1
    return Prediction(
        arm, totals["seconds"] / steps + shape.other_s_per_step, totals["calls"] / steps, totals["rows"] / steps,
        totals["informative"] / steps, totals["second"] / steps,
    )  # fmt: skip


def first_round_saving(arm: str, curve: GenerateCurve, shape: StudyShape, steps: int = 4000,
                       margins=(1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0)) -> tuple[float, float, float]:  # fmt: skip
    """`(margin, saving, break_even)`: the first-round margin with the lowest predicted step time, the share of step
    time it saves against the package's sizing (0 when none does better), and the most seconds the rest of a step
    (`other_s_per_step`) may take for that saving to stay at least `DECISIVE_SAVING`."""
    current = predict(arm, curve, shape, steps).s_per_step
    best = min(margins, key=lambda margin: predict(arm, curve, shape, steps, first_round_margin=margin).s_per_step)
    saved = current - predict(arm, curve, shape, steps, first_round_margin=best).s_per_step
    break_even = saved / DECISIVE_SAVING - (current - shape.other_s_per_step)
    return best, max(0.0, saved / current), max(0.0, break_even)


def seconds(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.3f}"


def prediction_table(curve: GenerateCurve, shape: StudyShape, steps: int) -> str:
    predictions = [predict(arm, curve, shape, steps) for arm in ARMS]
    baseline = predictions[0].s_per_informative_row
    lines = [
        "| arm | s/step | `generate` calls / step | rows / step | informative rows / step | steps with a second round "
        "| s per informative row | vs `GRPOTrainer` |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in predictions:
        lines.append(
            f"| {p.arm} | {seconds(p.s_per_step)} | {p.calls_per_step:.2f} | {p.rows_per_step:.0f} "
            f"| {p.informative_rows_per_step:.1f} | {p.second_round_share:.0%} | {p.s_per_informative_row:.4f} "
            f"| {p.s_per_informative_row / baseline:.2f}x |"
        )
    return "\n".join(lines)


def read_curve(path: Path) -> GenerateCurve:
    """A curve the study measured (`run.py --curve-rows`: curve.json)."""
    measured = json.loads(path.read_text(encoding="utf-8"))
    return GenerateCurve(tuple(measured["rows"]), tuple(measured["seconds"]))


def parse_curve(points: list[str]) -> GenerateCurve:
    pairs = [point.split(":") for point in points]
    return GenerateCurve(tuple(int(rows) for rows, _ in pairs), tuple(float(s) for _, s in pairs))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curve", nargs="+", metavar="ROWS:SECONDS", help="a measured curve (default: H200's)")
    parser.add_argument("--curve-json", type=Path, help="a curve the study measured (run.py --curve-rows)")
    parser.add_argument("--batch-groups", type=int, default=16, help="groups per generation batch and process")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--informative-share", type=float, help="default: the study workload's expected share")
    parser.add_argument("--other-s-per-step", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=20000, help="simulated steps per arm")
    options = parser.parse_args(argv)
    share = options.informative_share
    if share is None:
        from . import workload

        prompts = workload.make_prompts(4096, 0).pass_probabilities
        share = sum(workload.informative_probability(p, options.group_size) for p in prompts) / len(prompts)
    shape = StudyShape(options.batch_groups, options.group_size, share, other_s_per_step=options.other_s_per_step)
    if options.curve_json:
        curves = {f"measured ({options.curve_json})": read_curve(options.curve_json)}
    elif options.curve:
        curves = {"given": parse_curve(options.curve)}
    else:
        rows = shape.batch_groups * shape.group_size
        curves = {
            "H200, SmolLM2-360M shape, 256 new tokens (issue 31: 18.6, 20.1, 27.7 s for 128, 384, 768 rows)": H200_360M,
            f"linear, {H200_360M.call_seconds(rows):.1f} s per {rows} rows": linear_curve(rows, H200_360M.call_seconds(rows)),
        }  # fmt: skip
    print(f"Predicted by `python -m benchmarks.gpu_speed.cost_model` (a prediction, to be checked by the GPU study): "
          f"{shape.batch_groups} groups of {shape.group_size} per step on one process, informative share "
          f"{share:.3f}, {options.other_s_per_step:g} s per step besides generation, {options.steps} simulated steps, "
          f"first rounds sized with REFILL_MARGIN={REFILL_MARGIN}.")  # fmt: skip
    for name, curve in curves.items():
        print(f"\nCurve: {name}\n\n{prediction_table(curve, shape, options.steps)}\n")
        for arm in ("dapo_as_published", "dapo_defaults"):
            margin, saving, break_even = first_round_saving(arm, curve, shape, options.steps)
            if saving == 0:
                print(f"{arm}: no larger first round saves step time.")
                continue
            bound = (f"{DECISIVE_SAVING:.0%} or more while the rest of a step takes at most {break_even:.1f} s"
                     if break_even > 0 else f"less than {DECISIVE_SAVING:.0%} whatever the rest of a step takes")
            print(f"{arm}: a first round of margin {margin:g} instead of {REFILL_MARGIN:g} saves {saving:.1%} of the "
                  f"predicted step ({bound}).")  # fmt: skip


if __name__ == "__main__":
    main()
