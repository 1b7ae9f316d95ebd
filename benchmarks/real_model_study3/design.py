"""What study 3's method (docs/results/real_model_study3_method.md) fixes, in one place for its plan, its problem
split and, later, its runner."""

import dataclasses
import os
from dataclasses import dataclass

TASK_NAME = "2 terms, 2 digits, +"  # study 2's task (benchmarks/real_model_study/task.py)
# One reasoning-gym draw for every problem of the study; a seed no earlier study used (first benchmark 10,000,
# study 2's held-out set 20,000, pilot 30,000, study 2's training sets 0-7).
DRAW_SEED = 40_000
DRAW_SIZE = 8_000  # 4,079 distinct canonical forms, enough for 300 held out and 30 seeds of 120
ARMS = {
    "grpo": "`GRPOTrainer`, TRL's defaults, in the study's layout",
    "dapo": "DAPO as published: `DAPOConfig(skip_degenerate_prompts=False, dynamic_sampling_carry_surplus=False)`",
    "defaults": "the package's defaults: `DAPOConfig()` with carrying on (`dynamic_sampling_carry_surplus=True`)",
}
# The deciding measure, named before any run; the other is reported beside it.
DECIDING_MEASURE = "greedy accuracy"
MARGIN = 0.04  # comparison (1)'s non-inferiority margin, reached with 80 % power on the planning spread (plan.md)
SEEDS = tuple(range(10))
PILOT_SEED = len(SEEDS)  # the pilot trains on the block of problems after the study's seeds' blocks


@dataclass(frozen=True)
class Settings:
    """Study 2's step shape (so its realised spread applies), with four optimizer updates per generation batch so
    that clip-higher acts."""

    held_out_prompts: int = 300
    train_size: int = 120  # distinct problems per seed; at the last budget each is drawn about once or twice
    prompts_per_step: int = 2
    num_generations: int = 8
    max_completion_length: int = 32
    learning_rate: float = 1e-5
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 4  # 4 x gradient_accumulation_steps: each generation batch trains 4 updates
    token_budgets: tuple = (4_000, 8_000)  # cumulative generated completion tokens; the same for every arm
    fixed_step: int | None = 12  # every arm is also evaluated after this optimizer step, for the per-step comparisons
    sampled_eval_temperature: float = 1.0


# Where the runs write (result files committed, checkpoints and logs ignored), and the pilot apart from the grid.
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RUNS_DIR = os.path.join(RESULTS_DIR, "runs")
PILOT_DIR = os.path.join(RESULTS_DIR, "pilot")
STEP0_FILE = "step0.json"
# Generator seed of each evaluation point's sampled pass rate: step 0, then each token budget, then the fixed step,
# so the arms share each point's sampling noise whatever order they reach the points in.
EVAL_SEED_BASE = 10_000
# Metrics every run keeps per optimizer step: TRL's clip ratios (clip-higher acting is shown, not assumed),
# dynamic sampling's activity, and the policy ratio of carried rows (the instability rule looks at it first).
LOGGED = ("reward", "completions/mean_length", "completions/clipped_ratio", "frac_reward_zero_std",
          "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min",
          "clip_ratio/high_max", "dynamic_sampling/rounds", "dynamic_sampling/generated_groups",
          "dynamic_sampling/kept_groups", "dynamic_sampling/carried_groups",
          "dynamic_sampling/dropped_informative_groups", "dynamic_sampling/skipped_prompts",
          "dynamic_sampling/generated_tokens", "dynamic_sampling/carried_ratio_mean",
          "dynamic_sampling/carried_ratio_max")  # fmt: skip
# A run that has not evaluated every point after this many optimizer steps ends incomplete (at 8,000 tokens GRPO
# takes about 28 steps at study 2's completion lengths; this allows for completions far shorter).
MAX_STEPS = 400
# The pilot (method, "Pilot"): one run per arm on the block after the seeds', to the first budget only.
PILOT_SETTINGS = dataclasses.replace(Settings(), token_budgets=(4_000,), fixed_step=None)
PILOT_CPU_HOURS_LIMIT = 16.5  # above it at 10 seeds, the grid runs 9 seeds at margin 0.043
PILOT_FALLBACK = {"seeds": 9, "margin": 0.043}
PILOT_TRUNCATION_LIMIT = 0.20
# Only checks that the runner works end to end on the real model: a few held-out problems, two generation batches.
SMOKE = dataclasses.replace(Settings(), held_out_prompts=4, train_size=8, prompts_per_step=1, num_generations=2,
                            max_completion_length=8, token_budgets=(20,), fixed_step=4, steps_per_generation=2)
