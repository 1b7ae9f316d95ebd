"""Draws the documentation's figures into docs/figures/:

- `dynamic_sampling_step.png`: one dynamic-sampling step of `DAPOTrainer`: generation rounds, which groups are kept,
  carried or dropped, and the batch the step trains;
- `overlong_and_clip.png`: the soft overlong punishment, computed by the package's own reward function, and the
  clipped PPO objective per token with `DAPOConfig`'s clip range (clip-higher) beside `GRPOConfig`'s symmetric one,
  both read from the config classes' defaults.

    python scripts/draw_figures.py [--output_dir docs/figures]
"""

import argparse
import dataclasses
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COLOURS = {"informative": "#4caf50", "degenerate": "#bdbdbd", "carried": "#7e57c2", "surplus": "#ffb74d"}


def default_of(config_class, name: str):
    return next(field.default for field in dataclasses.fields(config_class) if field.name == name)


def group(ax, x, y, kind, label="", width=0.9, height=0.9):
    ax.add_patch(Rectangle((x, y), width, height, facecolor=COLOURS[kind], edgecolor="black", linewidth=0.8))
    if label:
        ax.text(x + width / 2, y + height / 2, label, ha="center", va="center", fontsize=8)


def arrow(ax, start, end, text="", text_offset=(0, 0.25)):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, linewidth=1.0, color="black"))
    if text:
        ax.text((start[0] + end[0]) / 2 + text_offset[0], (start[1] + end[1]) / 2 + text_offset[1], text,
                ha="center", va="bottom", fontsize=8.5)


def draw_step(path: Path) -> None:
    """One step with a batch of B = 6 groups: 2 groups carried in, a first round of the 6 dataloader prompts and 2
    extra groups (2 informative), a refill round of 6 (3 informative), 1 informative group left over."""
    fig, ax = plt.subplots(figsize=(11, 5.2))
    ax.set_xlim(0, 22)
    ax.set_ylim(-0.6, 9.6)
    ax.axis("off")
    ax.set_title("One dynamic-sampling step of DAPOTrainer (a batch of B = 6 groups; each box is one prompt's group of "
                 "num_generations completions)", fontsize=10)

    ax.text(0.2, 8.6, "carried from the\nprevious step", fontsize=9, va="center")
    for i in range(2):
        group(ax, 0.4 + i, 7.2, "carried", "c")

    round_one = ["informative", "degenerate", "informative", "degenerate", "degenerate", "degenerate",
                 "degenerate", "degenerate"]
    ax.text(3.6, 8.6, "round 1: the dataloader's 6 prompts + 2 extra groups\n(extra only once a pass rate is known)",
            fontsize=9, va="center")
    for i, kind in enumerate(round_one):
        group(ax, 3.8 + i, 7.2, kind, "d" if i < 6 else "x")
    ax.text(12.2, 7.65, "4 informative so far\n(2 carried + 2 fresh) < B:\nrefill", fontsize=8.5, va="center")

    round_two = ["informative", "informative", "degenerate", "informative", "degenerate", "degenerate"]
    ax.text(3.6, 5.9, "round 2 (refill): new prompts from the refill sampler, sized from this step's pass rate",
            fontsize=9, va="center")
    for i, kind in enumerate(round_two):
        group(ax, 3.8 + i, 4.5, kind, "r")
    ax.text(10.2, 4.95, "counts of informative groups are the only thing\nexchanged between processes for the decision",
            fontsize=8.5, va="center")

    arrow(ax, (8.0, 4.3), (8.0, 2.75), "selection, in generation order", text_offset=(2.6, -0.1))
    ax.text(0.2, 2.1, "trained\nthis step", fontsize=9, va="center")
    for i, (kind, label) in enumerate([("carried", "c"), ("carried", "c"), ("informative", "d"),
                                       ("informative", "d"), ("informative", "r"), ("informative", "r")]):
        group(ax, 2.0 + i, 1.6, kind, label)
    ax.text(2.0, 0.9, "B groups: carried ones first, then the first informative ones", fontsize=8.5)

    group(ax, 11.0, 1.6, "surplus", "r")
    ax.text(12.1, 2.05, "informative beyond B: carried to the next step\n(trained there with its generating policy's "
            "log-probs);\ndropped when dynamic_sampling_carry_surplus=False", fontsize=8.5, va="center")
    group(ax, 11.0, 0.1, "degenerate")
    ax.text(12.1, 0.55, "all completions scored alike (all right or all wrong):\nno signal, dropped", fontsize=8.5,
            va="center")
    ax.text(17.3, 8.6, "d: dataloader prompt\nx: extra group\nr: refill prompt\nc: carried group", fontsize=8.5,
            va="center")
    for i, (kind, label) in enumerate([("informative", "informative"), ("degenerate", "degenerate"),
                                       ("carried", "carried in"), ("surplus", "carried out")]):
        group(ax, 17.3, 6.6 - 0.75 * i, kind, width=0.6, height=0.55)
        ax.text(18.1, 6.6 - 0.75 * i + 0.27, label, fontsize=8.5, va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def draw_overlong_and_clip(path: Path) -> None:
    from trl import GRPOConfig

    from trl_variants import DAPOConfig
    from trl_variants.rewards.overlong import SoftOverlongPunishment

    max_length, buffer = 512, 128
    punishment = SoftOverlongPunishment(max_length, buffer, penalty_factor=default_of(DAPOConfig, "overlong_penalty_factor"))
    lengths = list(range(300, max_length + 1))
    values = punishment(completion_ids=[[0] * length for length in lengths])

    epsilon, epsilon_high = default_of(DAPOConfig, "epsilon"), default_of(DAPOConfig, "epsilon_high")
    grpo_epsilon = default_of(GRPOConfig, "epsilon")
    ratios = [0.5 + 0.005 * i for i in range(201)]

    def clipped(ratio, advantage, low, high):
        return min(ratio * advantage, max(min(ratio, 1 + high), 1 - low) * advantage)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(lengths, values, color="#c62828", linewidth=2)
    left.axvline(max_length - buffer, color="grey", linestyle=":", linewidth=1)
    left.axvline(max_length, color="grey", linestyle=":", linewidth=1)
    left.text(max_length - buffer - 4, -0.55, f"max_completion_length\n- overlong_buffer_length = {max_length - buffer}",
              ha="right", fontsize=8)
    left.text(max_length - 4, -0.15, f"max_completion_length\n= {max_length}", ha="right", fontsize=8)
    left.set_xlabel("completion length (tokens)")
    left.set_ylabel("reward added")
    left.set_title(f"Soft overlong punishment (buffer {buffer}, overlong_penalty_factor "
                   f"{punishment.penalty_factor:g})", fontsize=10)
    left.set_ylim(-1.15, 0.15)

    for advantage, colour in ((1.0, "#2e7d32"), (-1.0, "#1565c0")):
        right.plot(ratios, [clipped(r, advantage, epsilon, epsilon_high) for r in ratios], color=colour, linewidth=2,
                   label=f"DAPOConfig, A = {advantage:+g}: clip [1 - {epsilon:g}, 1 + {epsilon_high:g}]")
        right.plot(ratios, [clipped(r, advantage, grpo_epsilon, grpo_epsilon) for r in ratios], color=colour,
                   linewidth=1.2, linestyle="--", label=f"GRPOConfig, A = {advantage:+g}: clip 1 ± {grpo_epsilon:g}")
    for bound in (1 - epsilon, 1 + grpo_epsilon, 1 + epsilon_high):
        right.axvline(bound, color="grey", linestyle=":", linewidth=0.8)
    right.set_ylim(-1.6, 2.0)
    right.set_xlabel("policy ratio π_θ / π_old of a token")
    right.set_ylabel("clipped objective per token (to maximise)")
    right.set_title("Clip range: clip-higher lets a positive-advantage\ntoken's ratio rise to 1 + epsilon_high",
                    fontsize=10)
    right.legend(fontsize=7.5, loc="upper left")
    right.text(0.52, -1.45, "for A < 0 both configs clip at 1 - epsilon: the curves coincide", fontsize=7.5)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=str(REPO / "docs" / "figures"))
    output = Path(parser.parse_args(argv).output_dir)
    output.mkdir(parents=True, exist_ok=True)
    draw_step(output / "dynamic_sampling_step.png")
    draw_overlong_and_clip(output / "overlong_and_clip.png")
    print(f"wrote {output / 'dynamic_sampling_step.png'} and {output / 'overlong_and_clip.png'}")


if __name__ == "__main__":
    main()
