"""What a study fixes, in one object: its arms, task, seeds, settings and comparisons. A study is a small module
that builds a `Study` and ends with `main(STUDY)` (runner.py), so that `python -m <its module> run|grid|step0|report`
runs it; `example.py` is one."""

from collections.abc import Callable
from dataclasses import dataclass

from .analysis import ComparisonSpec
from .problems import question_key


@dataclass(frozen=True)
class Settings:
    """The step shape and evaluation points every arm shares."""

    held_out_prompts: int = 300
    train_size: int = 120  # distinct problems per seed
    prompts_per_step: int = 2
    num_generations: int = 8
    max_completion_length: int = 32
    learning_rate: float = 1e-5
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 4  # optimizer updates per generation batch (so that clip-higher acts)
    token_budgets: tuple = (4_000, 8_000)  # cumulative generated completion tokens, the same for every arm
    fixed_step: int | None = 12  # every arm is also evaluated after this optimizer step
    sampled_eval_temperature: float = 1.0
    # Budgets whose readings (both sides) also measure the sampled pass rate; None: every reading. Step 0 always does.
    sampled_budgets: tuple | None = None
    max_steps: int = 400  # a run not read at every point by then ends incomplete


# Only checks that the runner works end to end on the real model: a few problems, a few generation batches.
SMOKE = Settings(held_out_prompts=4, train_size=8, prompts_per_step=1, num_generations=2, max_completion_length=8,
                 steps_per_generation=2, token_budgets=(20,), fixed_step=4)

# Metrics every run keeps per optimizer step: TRL's clip ratios and dynamic sampling's activity (docs/metrics.md); a
# run keeps those its trainer logs.
LOGGED = ("reward", "completions/mean_length", "completions/clipped_ratio", "frac_reward_zero_std",
          "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "dynamic_sampling/rounds",
          "dynamic_sampling/generated_groups", "dynamic_sampling/kept_groups", "dynamic_sampling/carried_groups",
          "dynamic_sampling/dropped_informative_groups", "dynamic_sampling/skipped_prompts",
          "dynamic_sampling/generated_tokens", "dynamic_sampling/carried_ratio_mean",
          "dynamic_sampling/carried_ratio_max")  # fmt: skip


@dataclass(frozen=True)
class Study:
    """`trainer_and_config(arm, output_dir, shared_kwargs)` returns the arm's trainer class and config; `task` is a
    reasoning-gym (task, config) drawn once (`draw_seed`, `draw_size`) and split by `problem_key` (problems.py);
    `tokens_to_target` lists (arm, reference) pairs whose tokens to reach the reference's greedy score at the last
    budget the report gives (`analysis.target_endpoints`). `decide(found)`, given the greedy `Comparison`s fixed in
    advance (`analysis.FIXED`; exploratory and post hoc ones are reported, never decided on) by name and those
    endpoints by `analysis.tokens_key` and `analysis.gain_key`, returns the decision's lines."""

    name: str
    arms: dict
    trainer_and_config: Callable
    task: tuple
    draw_seed: int
    draw_size: int
    seeds: tuple
    results_dir: str
    comparisons: tuple[ComparisonSpec, ...]
    settings: Settings = Settings()
    smoke: Settings = SMOKE
    problem_key: Callable = question_key
    logged: tuple = LOGGED
    decide: Callable | None = None
    tokens_to_target: tuple = ()
    # Arms whose runs a study reuses from another study's results: (arm, runs folder) pairs; their complete runs there
    # replace this study's of that arm in the report.
    reused_runs: tuple = ()
    # (machine, counted as) pairs: runs printed by the first machine description are paired as if printed by the
    # second, where a study has shown that the first reproduces the second's runs exactly.
    machine_aliases: tuple = ()
