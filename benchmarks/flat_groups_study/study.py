"""The flat-groups study on the study harness: `dynamic_sampling="drop"` against `GRPOTrainer` and the package's
regenerating defaults on SmolLM2-135M-Instruct, every arm read on both sides of 4,000 and 8,000 generated tokens and
interpolated to exactly those. Method: docs/results/flat_groups_study/method.md.

    python -m benchmarks.flat_groups_study.study run --arm grpo --seed 0    # the reuse check (method, "Reuse"): passed
    python -m benchmarks.flat_groups_study.study grid --workers 2 --arms drop   # plan A: the `drop` runs only
    python -m benchmarks.flat_groups_study.study report   # pairs them with the allocation study's `grpo` and `defaults`

Task A, its draw, seeds, held-out set and settings are the allocation study's (docs/results/allocation_study/, whose
code left the package after it finished): their values are written here, so that this study needs none of its code.
Results go to docs/results/flat_groups_study/runs/, committed as each run lands.
"""

import math
import os
import sys

from benchmarks.study_harness.analysis import ComparisonSpec, gain_key
from benchmarks.study_harness.problems import arithmetic_key
from benchmarks.study_harness.runner import main
from benchmarks.study_harness.study import LOGGED, Settings, Study

# The allocation study's task A and its draw (its pilot.py): two terms of two digits, `+`.
TASK = ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, "operators": ["+"],
                             "allow_parentheses": False, "allow_negation": False})
DRAW_SEED, DRAW_SIZE = 56_000, 8_000
SEEDS = tuple(range(15))
# Its settings: 32 training problems a seed, 300 held-out, 2 prompts x 8 completions a step, four updates per
# generation batch, learning rate 3e-6, budgets of 4,000 and 8,000 tokens, the sampled pass rate read at the last.
SETTINGS = Settings(train_size=32, token_budgets=(4_000, 8_000), fixed_step=None, learning_rate=3e-6,
                    sampled_budgets=(8_000,))

MARGIN = 0.03
EQUAL_UPDATES = 12
# The allocation study's realised SD of `allocation` - `grpo` at matched tokens, the larger of its two paired spreads
# against `grpo` (`defaults` - `grpo`: 0.0357): 15 seeds give 82 % power at the 0.03 margin.
PLANNED_SD = 0.0376

# `DAPOConfig()`'s dynamic-sampling fields as the allocation study's `defaults` arm set them (carrying resolves to on
# in this layout), named by value so that a later change of a default cannot change what an arm trains.
DEFAULTS = {"dynamic_sampling": True, "dynamic_sampling_metric": "accuracy", "dynamic_sampling_tolerance": 1e-6,
            "dynamic_sampling_max_rounds": 4, "dynamic_sampling_on_exhausted": "fill",
            "dynamic_sampling_carry_surplus": True, "skip_degenerate_prompts": False,
            "max_rows_per_generate_call": None}  # fmt: skip
DROP = {**DEFAULTS, "dynamic_sampling": "drop", "dynamic_sampling_carry_surplus": None}

ARMS = {"grpo": "`GRPOTrainer`, TRL's defaults",
        "defaults": "the package's defaults: dynamic sampling that regenerates, with carrying",
        "drop": '`dynamic_sampling="drop"`: one generation batch per step, flat groups left out of the loss'}


def trainer_and_config(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "defaults":
        return DAPOTrainer, DAPOConfig(output_dir, **DEFAULTS, **shared)
    if arm == "drop":
        return DAPOTrainer, DAPOConfig(output_dir, **DROP, **shared)
    raise ValueError(f"--arm {arm!r} is not an arm of the flat-groups study; expected one of {list(ARMS)}.")


# The readings at each budget beside the mean are the method's own but decide nothing: "exploratory".
COMPARISONS = (
    ComparisonSpec("(1) `drop` - `grpo` at matched tokens", "drop", "grpo", "tokens", "non-inferiority", MARGIN,
                   planned_sd=PLANNED_SD, budget_status="exploratory"),
    # No difference is fixed for (2) to be sized for: its power is reported at the realised spread.
    ComparisonSpec("(2) `drop` - `defaults` at matched tokens", "drop", "defaults", "tokens", "ahead", math.nan,
                   planned_sd=PLANNED_SD, budget_status="exploratory"),
    ComparisonSpec("(3) `drop` - `grpo`, completions per informative row", "drop", "grpo", "generation", "detection",
                   math.nan),
    ComparisonSpec("(3) `drop` - `defaults`, completions per informative row", "drop", "defaults", "generation",
                   "detection", math.nan),
    # The equal-updates reading, labelled post hoc as the allocation study's was (it was chosen there after seeing
    # its results): at 12 optimizer updates, the most every allocation-study run was read on both sides of.
    ComparisonSpec("(post hoc) `drop` - `grpo` at equal updates", "drop", "grpo", "updates", "detection", math.nan,
                   status="post hoc", updates=EQUAL_UPDATES),
    ComparisonSpec("(post hoc) `drop` - `defaults` at equal updates", "drop", "defaults", "updates", "detection",
                   math.nan, status="post hoc", updates=EQUAL_UPDATES),
)


def decide(found: dict) -> list[str]:
    """The method's rule: validity (`grpo`'s greedy gain over step 0 at the last budget, lower end at least twice the
    margin); then (1) decides the README's recommendation and (1) with (2) `DAPOTrainer`'s default."""
    gain = found[gain_key("grpo")]
    first, second = found[COMPARISONS[0].name], found[COMPARISONS[1].name]
    lines = [f"Validity: `grpo`'s gain over step 0 {gain.text()}, lower end "
             + ("at least" if gain.low >= 2 * MARGIN else "below") + f" {2 * MARGIN:.2f}",
             f"(1) {first.verdict()}: {first.interval.text()}", f"(2) {second.verdict()}: {second.interval.text()}"]
    if not gain.low >= 2 * MARGIN:  # NaN (too few seeds) fails too
        return [*lines, "no decision: the runs learnt too little to judge a margin of 0.03; nothing changes"]
    if not first.passes():
        return [*lines, 'nothing changes: (1) failed, so "drop" is not recommended and the default stays "regenerate"']
    if not second.passes():
        return [*lines, 'the README recommends dynamic_sampling="drop" where generation is the budget; the default '
                        'stays "regenerate": (2) did not show `drop` ahead']
    return [*lines, 'DAPOTrainer\'s default becomes dynamic_sampling="drop", and the README recommends it where '
                    'generation is the budget; "regenerate" stays, documented as DAPO as published']


# The reuse check passed (method, execution record): `grpo-seed0` rerun at the method's commit on an AVX2 machine
# reproduced the allocation study's run exactly, so that study's `grpo` and `defaults` runs are reused (plan A), and
# runs printed by this machine description are paired as the record's.
ALLOCATION_RUNS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                                "docs", "results", "allocation_study", "runs"))
CHECKED_MACHINE = ("AMD EPYC, 2 CPUs, AVX2 kernels, torch 2.13.0+cpu", "AMD EPYC, 2 CPUs, AVX512 kernels, torch 2.13.0+cpu")

STUDY = Study(name="Flat-groups study, task A", arms=ARMS, trainer_and_config=trainer_and_config, task=TASK,
              draw_seed=DRAW_SEED, draw_size=DRAW_SIZE, seeds=SEEDS,
              results_dir=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                                        os.pardir, "docs", "results", "flat_groups_study")),
              comparisons=COMPARISONS, settings=SETTINGS, problem_key=arithmetic_key,
              logged=(*LOGGED, "dynamic_sampling/kept_rows_frac", "dynamic_sampling/pass_rate"), decide=decide,
              reused_runs=(("grpo", ALLOCATION_RUNS), ("defaults", ALLOCATION_RUNS)), machine_aliases=(CHECKED_MACHINE,))


if __name__ == "__main__":
    sys.exit(main(STUDY, __spec__.name))
