"""What a TensorBoard user sees of dynamic sampling: a short `DAPOTrainer` run of SmolLM2-135M-Instruct (the task
and settings of examples/real_model_demo.py) reporting to TensorBoard, and a plot of its `dynamic_sampling/*`
scalars drawn from the event file the run wrote, not from the trainer's memory.

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
    from trl_variants import DAPOConfig, DAPOTrainer
    from trl_variants.machine import describe_machine
    from trl_variants.rewards.reasoning_gym_source import reasoning_gym_source
    from trl_variants.smollm2 import load_smollm2

    from ..study_harness.problems import task_example

    task = ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
                                 "operators": ["+", "-"], "allow_parentheses": False, "allow_negation": False})
    train = reasoning_gym_source(*task, size=1000, seed=args.seed, example=task_example(*task))
    model, tokenizer = load_smollm2()
    with tempfile.TemporaryDirectory() as folder:
        logging_dir = Path(folder) / "runs"
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(logging_dir)  # transformers 5's TensorBoardCallback reads it
        config = DAPOConfig(
            folder, per_device_train_batch_size=16, num_generations=8, max_completion_length=32, learning_rate=1e-5,
            beta=0.0, overlong_buffer_length=8, gradient_checkpointing=False, max_steps=args.steps, seed=args.seed,
            use_cpu=True, logging_steps=1, report_to=["tensorboard"], save_strategy="no", disable_tqdm=True,
        )  # fmt: skip
        DAPOTrainer(model, [train.reward_func], args=config, train_dataset=train.dataset,
                    processing_class=tokenizer).train()  # fmt: skip
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
