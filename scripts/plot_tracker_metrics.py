"""What a TensorBoard user sees of dynamic sampling on the real model: trains SmolLM2-135M-Instruct with
`DAPOTrainer` on the real demo's task for a few steps with `report_to=["tensorboard"]`, reads the event file back
with TensorBoard's own reader and plots four of its `train/dynamic_sampling/*` scalars per step into
docs/images/tracker_metrics.png (docs/metrics.md shows it). Prints the machine and the load average.

    python scripts/plot_tracker_metrics.py            # 8 steps
    python scripts/plot_tracker_metrics.py --steps 3  # a quick look
"""

import argparse
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

from trl_variants.real.run import make_held_out, train_and_evaluate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PLOT = REPO / "docs" / "images" / "tracker_metrics.png"
PANELS = {
    "train/dynamic_sampling/reward_all_groups": "reward over every generated group",
    "train/dynamic_sampling/pass_rate": "informative share of generated groups",
    "train/dynamic_sampling/generated_groups": "groups generated for the batch",
    "train/dynamic_sampling/rounds": "generation rounds",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as logging_dir:
        os.environ["TENSORBOARD_LOGGING_DIR"] = logging_dir  # transformers 5's TensorBoardCallback reads it
        result = train_and_evaluate(variant="dapo", steps=args.steps, held_out=make_held_out(prompts=4),
                                    samples_per_prompt=1, config_overrides={"report_to": ["tensorboard"]})  # fmt: skip
        events = event_accumulator.EventAccumulator(logging_dir, size_guidance={event_accumulator.SCALARS: 0})
        events.Reload()
        scalars = {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in PANELS}
    figure, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    for axis, (tag, title) in zip(axes, PANELS.items(), strict=True):
        steps, values = zip(*scalars[tag], strict=True)
        axis.plot(steps, values, marker="o")
        axis.set_title(f"{tag.removeprefix('train/')}\n{title}", fontsize=9)
        axis.set_xlabel("step")
    figure.suptitle(f"SmolLM2-135M-Instruct, DAPOTrainer, {args.steps} steps, read from the TensorBoard event file "
                    f"({result.machine})", fontsize=9)  # fmt: skip
    figure.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=110)
    print(f"Wrote {PLOT.relative_to(REPO)}; printed on {result.machine}, {result.seconds_per_step:.0f} s per step; "
          f"load average {', '.join(f'{x:.1f}' for x in load_before)} before, "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} after.")
    for tag in PANELS:
        print(tag, [round(value, 3) for _, value in scalars[tag]])


if __name__ == "__main__":
    main()
