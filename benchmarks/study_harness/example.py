"""Study 3's design on the harness, read at exactly matched tokens: the package's defaults and DAPO as published
against `GRPOTrainer` on SmolLM2-135M-Instruct and reasoning-gym sums of two terms from 0 to 100, every seed on its
own 120 problems, four optimizer updates per generation batch. The template for the next study (copy it, change the
arms, task, seeds and comparisons); its results folder is `benchmarks/study_harness/results/example/`, which git
ignores until a study is committed to.

    python -m benchmarks.study_harness.example grid --workers 2
    python -m benchmarks.study_harness.example report
"""

import os
import sys

from benchmarks.shared.settings import DAPO_AS_PUBLISHED

from .analysis import ComparisonSpec
from .problems import arithmetic_key
from .runner import main
from .study import Study

# Study 3's planned margin of (1) and the differences its plan sized (2)-(4) to detect (docs/results/real_model_study3/plan.md).
MARGIN = 0.04


def trainer_and_config(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "dapo":
        return DAPOTrainer, DAPOConfig(output_dir, **DAPO_AS_PUBLISHED, **shared)
    if arm == "defaults":  # named by value, so that a later change of a default cannot change what this arm trains
        return DAPOTrainer, DAPOConfig(output_dir, skip_degenerate_prompts=False, dynamic_sampling_carry_surplus=True,
                                       **shared)
    raise ValueError(f"--arm {arm!r} is not an arm of this study; expected one of {list(STUDY.arms)}.")


def decide(found: dict) -> list[str]:
    first = found["(1) `defaults` - `grpo` at equal tokens"]
    return [("(1) passes: the defaults lose less than the margin to `GRPOTrainer` at equal tokens" if first.passes()
             else "(1) fails: non-inferiority at equal tokens was not shown") + "; no default changes on it alone"]


STUDY = Study(
    name="Defaults against GRPOTrainer at matched tokens",
    arms={"grpo": "`GRPOTrainer`, TRL's defaults", "dapo": "DAPO as published",
          "defaults": "the package's defaults (carrying on)"},
    trainer_and_config=trainer_and_config,
    task=("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, "operators": ["+"],
                               "allow_parentheses": False, "allow_negation": False}),
    draw_seed=40_000, draw_size=8_000, seeds=tuple(range(10)),
    results_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "example"),
    comparisons=(
        ComparisonSpec("(1) `defaults` - `grpo` at equal tokens", "defaults", "grpo", "tokens", "non-inferiority",
                       MARGIN),
        ComparisonSpec("(2) `dapo` - `grpo` at equal tokens", "dapo", "grpo", "tokens", "detection", 0.040),
        ComparisonSpec("(2) `dapo` - `grpo` at the fixed step", "dapo", "grpo", "fixed_step", "detection", 0.048),
        ComparisonSpec("(3) `defaults` - `dapo` at the fixed step", "defaults", "dapo", "fixed_step", "detection",
                       0.048),
        ComparisonSpec("(4) `defaults` - `dapo`, completions per informative row", "defaults", "dapo", "generation",
                       "detection", 2.35),
    ),
    problem_key=arithmetic_key,
    decide=decide,
)

if __name__ == "__main__":
    sys.exit(main(STUDY, __spec__.name))
