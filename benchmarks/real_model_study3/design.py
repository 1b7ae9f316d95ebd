"""What study 3's method (docs/results/real_model_study3_method.md) fixes, in one place for its plan, its problem
split and, later, its runner."""

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
    fixed_step: int = 12  # every arm is also evaluated after this optimizer step, for the per-step comparisons
    sampled_eval_temperature: float = 1.0
