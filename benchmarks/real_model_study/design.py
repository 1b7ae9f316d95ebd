"""What the real-model study fixes in docs/results/real_model_study_method.md, in one place for its runner and its
report: the arms, seeds, task, held-out seed, settings and where the result files go."""

import os
from dataclasses import dataclass

RUNS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "runs")
STEP0_FILE = "step0.json"
TASK_NAME = "2 terms, 2 digits, +"
HELD_OUT_SEED = 20_000
SEEDS = tuple(range(8))

ARMS = {
    "grpo": "GRPO (`GRPOTrainer`, TRL's defaults)",
    "dapo": "DAPO as published (`DAPOTrainer`, skipping and carrying off)",
    "defaults": "the defaults when the study was designed (`DAPOTrainer`, skipping and carrying on)",
    "carry_only": "DAPO + carrying, no skipping (the fallback arm)",
}
LOGGED = ("reward", "completions/mean_length", "completions/clipped_ratio", "frac_reward_zero_std",
          "dynamic_sampling/rounds", "dynamic_sampling/generated_groups", "dynamic_sampling/kept_groups",
          "dynamic_sampling/filled", "dynamic_sampling/carried_groups", "dynamic_sampling/dropped_informative_groups",
          "dynamic_sampling/skipped_prompts", "dynamic_sampling/generated_tokens")  # fmt: skip
# The three arms of the grid; `carry_only` runs only if comparison (a) fails.
GRID_ARMS = ("grpo", "dapo", "defaults")


@dataclass
class Settings:
    """The method's settings. The attribute names are the first benchmark's, so its recorder and trainer config
    (`real_model_recorder.Recorder`, `real_model_benchmark.shared_config`) read them unchanged."""

    held_out_prompts: int = 300
    train_size: int = 10
    eval_samples: int = 1
    prompts_per_step: int = 2
    num_generations: int = 8
    max_completion_length: int = 32
    learning_rate: float = 1e-5
    max_steps: int = 20
    eval_every: int = 5


# Only checks that the script works end to end: a few held-out problems, two steps.
SMOKE = Settings(held_out_prompts=4, train_size=2, prompts_per_step=1, num_generations=2, max_completion_length=8,
                 max_steps=2, eval_every=1)
