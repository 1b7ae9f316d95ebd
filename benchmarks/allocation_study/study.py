"""The allocation study (issue 56) on the study harness: `GRPOTrainer`, the package's defaults and the allocation
mode on SmolLM2-135M-Instruct, every arm read at exactly matched generated tokens. Method:
docs/results/allocation_study/method.md; the task and the learning rate are the pilots' choices
(`python -m benchmarks.allocation_study.pilot choose`, `... choose_rate`).

    python -m benchmarks.allocation_study.study grid --workers 2
    python -m benchmarks.allocation_study.study report

Its held-out set, seeds' blocks and settings are the pilot's (pilot.py), so the pilot's block is the one after the
seeds'; results go to docs/results/allocation_study/runs/, committed as each run completes.
"""

import dataclasses
import math
import os
import sys

from benchmarks.study_harness.analysis import ComparisonSpec, gain_key, tokens_key
from benchmarks.study_harness.problems import arithmetic_key
from benchmarks.study_harness.runner import main
from benchmarks.study_harness.study import Study

from . import pilot

# The task pilot's choice among pilot.CANDIDATES, and the learning-rate pilot's (method: "Learning rate").
TASK = "A"
LEARNING_RATE = 3e-6

# The method's margin for (1) and study 3's realised SD of a paired difference at matched tokens, which sized it.
MARGIN = 0.03
PLANNED_SD = 0.0496
# The method's budget rule (a): the budgets of 4,000 and 8,000 tokens; the sampled pass rate only at the last
# budget's two readings (greedy at every reading); step 0 measures both.
SETTINGS = dataclasses.replace(pilot.SETTINGS, token_budgets=(4_000, 8_000), sampled_budgets=(8_000,),
                               learning_rate=LEARNING_RATE)
# The post hoc comparison per optimizer update reads every arm at this many updates.
EQUAL_UPDATES = 12
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "docs", "results",
                       "allocation_study")

# `DAPOConfig()`'s dynamic-sampling fields as they resolve in this layout (one accumulation step, four updates per
# generation batch: carrying is supported, so its `None` resolves to on), named by value so that a later change of
# a default cannot change what the `defaults` arm trains.
DEFAULTS = {"dynamic_sampling": True, "dynamic_sampling_metric": "accuracy", "dynamic_sampling_tolerance": 1e-6,
            "dynamic_sampling_max_rounds": 4, "dynamic_sampling_on_exhausted": "fill",
            "dynamic_sampling_carry_surplus": True, "dynamic_sampling_allocation": False,
            "skip_degenerate_prompts": False, "max_rows_per_generate_call": None}  # fmt: skip
# The allocation mode's fields (the posterior fades with a half-life of one pass over the training problems)...
ALLOCATION = {**DEFAULTS, "dynamic_sampling_allocation": True, "skip_memory_epochs": 1.0}
# ...and its constants, which are not config fields (trl_variants/experimental/allocation/allocator.py): a run
# refuses to start if the module's differ from these.
ALLOCATOR_CONSTANTS = {"CANDIDATES_PER_GROUP": 4, "CHUNK": 2, "MAX_DRAWS_PER_GROUP": 4}


def check_allocator_constants() -> None:
    from trl_variants.experimental.allocation import allocator

    found = {name: getattr(allocator, name) for name in ALLOCATOR_CONSTANTS}
    if found != ALLOCATOR_CONSTANTS:
        raise ValueError(f"allocation arm: the allocator's constants are {found}; the study's method fixes "
                         f"{ALLOCATOR_CONSTANTS}.")


def trainer_and_config(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "defaults":
        return DAPOTrainer, DAPOConfig(output_dir, **DEFAULTS, **shared)
    if arm == "allocation":
        check_allocator_constants()
        return DAPOTrainer, DAPOConfig(output_dir, **ALLOCATION, **shared)
    raise ValueError(f"--arm {arm!r} is not an arm of the allocation study; expected one of {list(ARMS)}.")


ARMS = {"grpo": "`GRPOTrainer`, TRL's defaults", "defaults": "the package's defaults (dynamic sampling, carrying)",
        "allocation": "the defaults plus the allocation mode (`dynamic_sampling_allocation=True`)"}

COMPARISONS = (
    ComparisonSpec("(1) `allocation` - `grpo` at matched tokens", "allocation", "grpo", "tokens", "non-inferiority",
                   MARGIN, planned_sd=PLANNED_SD),
    # The method fixes no difference for (2) to be sized for: its power is reported at the realised spread only.
    ComparisonSpec("(2) `allocation` - `defaults` at matched tokens", "allocation", "defaults", "tokens", "ahead",
                   math.nan, planned_sd=PLANNED_SD),
    ComparisonSpec("(4) `allocation` - `grpo`, completions per informative row", "allocation", "grpo", "generation",
                   "detection", math.nan),
    ComparisonSpec("(4) `allocation` - `defaults`, completions per informative row", "allocation", "defaults",
                   "generation", "detection", math.nan),
    # Added after the study from the same run files; not in the method, so they decide nothing. The defaults against
    # `GRPOTrainer` at matched tokens (the method compared the allocation mode only)...
    ComparisonSpec("(added) `defaults` - `grpo` at matched tokens", "defaults", "grpo", "tokens", "detection",
                   math.nan, status="exploratory", budget_status="exploratory"),
    # ...and per optimizer update, chosen after seeing that dynamic sampling made fewer updates per token: at 12
    # updates, the most every run of every arm was read on both sides of.
    ComparisonSpec("(added) `defaults` - `grpo` at equal updates", "defaults", "grpo", "updates", "detection",
                   math.nan, status="post hoc", updates=EQUAL_UPDATES),
    ComparisonSpec("(added) `allocation` - `grpo` at equal updates", "allocation", "grpo", "updates", "detection",
                   math.nan, status="post hoc", updates=EQUAL_UPDATES),
)


def decide(found: dict) -> list[str]:
    """The method's rule: validity (`grpo`'s greedy gain over step 0 at the last budget with a lower end of at least
    twice the margin), then (1) non-inferior to `grpo` and (2) ahead of the defaults; (3) is quoted, deciding
    nothing."""
    gain = found[gain_key("grpo")]
    first, second = found[COMPARISONS[0].name], found[COMPARISONS[1].name]
    tokens = found[tokens_key("allocation", "grpo")]
    lines = [f"Validity: `grpo`'s gain over step 0 {gain.text()}, lower end "
             + ("at least" if gain.low >= 2 * MARGIN else "below") + f" {2 * MARGIN:.2f}",
             f"(1) {first.verdict()}: {first.interval.text()}", f"(2) {second.verdict()}: {second.interval.text()}",
             (f"(3) tokens to reach `grpo`'s final accuracy, median ratio {tokens.text()} (goal 0.67 or less; fewer "
              "tokens claimed only if the upper end is below 1)")]
    if not gain.low >= 2 * MARGIN:  # NaN (too few seeds) fails too
        return [*lines, "no decision: the runs learnt too little to judge a margin of 0.03; the mode stays opt-in"]
    failed = [name for name, comparison in (("(1)", first), ("(2)", second)) if not comparison.passes()]
    return [*lines, "the allocation mode becomes the default" if not failed
            else f"the allocation mode stays opt-in: {' and '.join(failed)} failed"]


def allocation_study(task: str) -> Study:
    """The study on the candidate task `task` (pilot.CANDIDATES)."""
    if task not in pilot.CANDIDATES:
        raise ValueError(f"allocation_study: task={task!r}; expected one of {list(pilot.CANDIDATES)} (the pilot's "
                         "candidates).")
    return Study(name=f"Allocation study, task {task}", arms=ARMS, trainer_and_config=trainer_and_config,
                 task=pilot.CANDIDATES[task], draw_seed=pilot.DRAW_SEED, draw_size=pilot.DRAW_SIZE, seeds=pilot.SEEDS,
                 results_dir=os.path.normpath(RESULTS), comparisons=COMPARISONS, settings=SETTINGS,
                 problem_key=arithmetic_key, decide=decide,
                 tokens_to_target=(("allocation", "grpo"), ("defaults", "grpo")))


def command_line(argv=None) -> int:
    """The harness's command line on the pilot's task."""
    return main(allocation_study(TASK), "benchmarks.allocation_study.study", argv)


if __name__ == "__main__":
    sys.exit(command_line())
