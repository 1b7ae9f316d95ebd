"""What a TensorBoard user sees of dynamic sampling: a short `DAPOTrainer` run of SmolLM2-135M-Instruct (the real
demo's task and settings) reporting to TensorBoard, and a plot of its `dynamic_sampling/*` scalars drawn from the
event file the run wrote, not from the trainer's memory.

    python -m benchmarks.tracker_metrics.tracker_metrics [--steps 6] [--seed 0] [--output docs/images/tracker_metrics.png]

About 35 s a step on a 2-core CPU. The scalars plotted are exactly those TensorBoard's reader returns.
"""

import argparse
import os
import tempfile
from pathlib import Path

PANELS = (
    ("generation", ("dynamic_sampling/rounds", "dynamic_sampling/generated_groups", "dynamic_sampling/kept_groups",
                    "dynamic_sampling/carried_groups")),
    ("share of generated groups", ("dynamic_sampling/pass_rate", "dynamic_sampling/all_correct_frac",
                                   "dynamic_sampling/all_wrong_frac")),
    ("reward", ("dynamic_sampling/reward_all_groups", "reward")),
)  # fmt: skip


def read_scalars(logging_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's event file, by tag, as (step, value) pairs, through TensorBoard's own reader."""
    from tensorboard.backend.event_processing import event_accumulator

    (event_file,) = logging_dir.rglob("events.out.tfevents.*")
    events = event_accumulator.EventAccumulator(str(event_file.parent), size_guidance={event_accumulator.SCALARS: 0})
    events.Reload()
    return {
        tag.removeprefix("train/"): [(event.step, event.value) for event in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def plot(scalars: dict, output: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    for axis, (name, tags) in zip(axes, PANELS):
        for tag in tags:
            if tag in scalars:
                steps, values = zip(*scalars[tag])
                axis.plot(steps, values, marker="o", label=tag.removeprefix("dynamic_sampling/"))
        axis.set_title(name)
        axis.set_xlabel("optimizer step")
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=Path("docs/images/tracker_metrics.png"))
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from trl_variants.machine import describe_machine
    from trl_variants.real.run import train_and_evaluate

    with tempfile.TemporaryDirectory() as folder:
        logging_dir = Path(folder) / "runs"
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(logging_dir)  # transformers 5's TensorBoardCallback reads it
        train_and_evaluate(
            "dapo", seed=args.seed, steps=args.steps, samples_per_prompt=1,
            config_overrides={"report_to": ["tensorboard"], "logging_steps": 1},
        )  # fmt: skip
        scalars = read_scalars(logging_dir)
    dynamic = sorted(tag for tag in scalars if tag.startswith("dynamic_sampling/"))
    print(f"{len(dynamic)} dynamic_sampling/* scalars in the event file: {', '.join(dynamic)}")
    for tag in dynamic:
        print(f"  {tag}: " + ", ".join(f"{step}: {value:g}" for step, value in scalars[tag]))
    title = f"DAPOTrainer (defaults), SmolLM2-135M-Instruct, seed {args.seed}, read from TensorBoard's event file"
    plot(scalars, args.output, title)
    print(f"wrote {args.output}; machine: {describe_machine()}")


if __name__ == "__main__":
    main()
