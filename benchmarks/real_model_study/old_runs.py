"""What the power calculation reads from the first real-model benchmark's 12 result files: the seed-to-seed spread
of the paired differences standing in for the study's comparisons, their own evaluation noise, generation per
informative trained row, and CPU seconds per optimizer step."""

import glob
import json
import math
import os
import statistics

from .power_formulas import evaluation_variance, q_from_counts

# Where the first benchmark's result files were when this ran; a reorganized tree passes --old-results.
OLD_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "real_model", "results")
# The comparisons fixed in advance, as (arm, baseline) of the old runs standing in for the study's arms.
COMPARISONS = {
    "a: defaults - DAPO as published": ("dapo_skip_carry", "dapo"),
    "b: DAPO as published - GRPOTrainer": ("dapo", "grpo"),
}


def load_old_runs(directory: str) -> dict:
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*-seed*.json"))):
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
        runs[(run["arm"], run["seed"])] = run
    if not runs:
        raise FileNotFoundError(f"power.py: no result files (ARM-seedS.json) in {directory}; pass --old-results.")
    return runs


def old_q(run: dict, index: int) -> float:
    settings = run["settings"]
    return q_from_counts(run["accuracy"][index], run["always_right"][index], run["always_wrong"][index],
                         settings["held_out_prompts"], settings["eval_samples"])


def accuracy_at_tokens(run: dict, tokens: float) -> float:
    import numpy

    return float(numpy.interp(tokens, run["eval_tokens"], run["accuracy"]))


def old_spread(runs: dict) -> dict:
    """Per comparison: the seed-to-seed variance of the paired difference per evaluation step (pooled over the
    steps after 0), of its mean over those evaluations and at equal generated tokens, each with the old runs' own
    evaluation variance and the training part left after subtracting it."""
    seeds = sorted({seed for _, seed in runs})
    out = {}
    for name, (arm, baseline) in COMPARISONS.items():
        pairs = [(runs[(arm, seed)], runs[(baseline, seed)]) for seed in seeds]
        steps = pairs[0][0]["eval_steps"]
        prompts, samples = (pairs[0][0]["settings"][key] for key in ("held_out_prompts", "eval_samples"))
        later = range(1, len(steps))
        per_step = {steps[i]: statistics.variance([a["accuracy"][i] - b["accuracy"][i] for a, b in pairs])
                    for i in later}
        old_eval = statistics.fmean(evaluation_variance(old_q(run, i), prompts, samples)
                                    for pair in pairs for run in pair for i in later)
        mean_over = statistics.variance([statistics.fmean(a["accuracy"][i] - b["accuracy"][i] for i in later)
                                         for a, b in pairs])
        tokens = min(run["eval_tokens"][-1] for run in runs.values())
        at_tokens = statistics.variance([accuracy_at_tokens(a, tokens) - accuracy_at_tokens(b, tokens)
                                         for a, b in pairs])
        pooled = statistics.fmean(per_step.values())
        out[name] = {
            "seeds": len(seeds), "evaluations_after_step_0": len(later), "old_prompts": prompts,
            "old_samples": samples, "old_evaluation_variance": old_eval,
            "per_step_sd": {str(step): math.sqrt(value) for step, value in per_step.items()},
            "pooled_per_step_sd": math.sqrt(pooled), "mean_over_evaluations_sd": math.sqrt(mean_over),
            "equal_tokens": tokens, "equal_tokens_sd": math.sqrt(at_tokens),
            "training_variance": {"per_step": pooled - 2 * old_eval,
                                  "mean_over_evaluations": mean_over - 2 * old_eval / len(later),
                                  "equal_tokens": at_tokens - 2 * old_eval},
        }  # fmt: skip
    return out


def old_generation_spread(runs: dict) -> dict:
    """(c): generated completions per informative trained row up to the last step, per run, and the seed-to-seed
    spread of the paired difference defaults - DAPO as published."""
    def per_row(run):
        group = run["settings"]["num_generations"]
        completions = run["eval_completions"][-1]
        if run["arm"] in ("dapo", "dapo_skip_carry"):
            rows = group * sum(run["logged"]["dynamic_sampling/kept_groups"].values())
        else:
            rows = group * sum(c["groups"] - c["equal_score_groups"] for c in run["probe"].values())
        return completions / rows

    seeds = sorted({seed for _, seed in runs})
    values = {arm: [per_row(runs[(arm, seed)]) for seed in seeds] for arm in ("grpo", "dapo", "dapo_skip_carry")}
    differences = [a - b for a, b in zip(values["dapo_skip_carry"], values["dapo"], strict=True)]
    return {"per_run": values, "difference_sd": statistics.stdev(differences),
            "difference_mean": statistics.fmean(differences)}


def old_step_seconds(runs: dict) -> dict:
    """CPU seconds per optimizer step of each old arm at one torch thread (evaluations excluded), mean over seeds."""
    arms = sorted({arm for arm, _ in runs})
    return {arm: statistics.fmean(run["train_cpu_seconds"][-1] / run["eval_steps"][-1]
                                  for (name, _), run in runs.items() if name == arm) for arm in arms}
