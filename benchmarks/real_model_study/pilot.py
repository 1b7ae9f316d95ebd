"""Pilot of the real-model study: picks the task by measurement, before any arm runs.

    python -m benchmarks.real_model_study.pilot [--prompts 56] [--samples 8] [--output results/pilot.json]

For each candidate reasoning-gym configuration (`task.CANDIDATES`) it measures SmolLM2-135M-Instruct's base
sampled pass rate (`trl_variants.real.evaluation.sampled_pass_rate`, temperature 1.0, at most 32 new tokens: the
study's completion length) on `--prompts` distinct problems x `--samples` samples, in the real-model example's
prompt format (one worked exchange, `trl_variants.real.run.task_example`), and records the spread of per-prompt
pass rates, how often the answer format of the worked example is followed, the problem space (distinct questions and
distinct canonical forms), the time taken and the load average. One torch thread.

Rule, fixed before the pilot ran: a candidate qualifies when its mean pass rate is 0.1-0.4, at least half its
prompts are neither always right nor always wrong (k samples), at least 90 % of its samples end on an `Answer:`
line (the format is already learnt from the worked example, so a rise in training is not mostly format) and its
space holds at least 1,000 canonical forms (300 held out, the rest for training with room). Among qualifiers, the
one with the largest share of prompts neither always right nor always wrong is chosen; ties go to the mean closest
to 0.25.
"""

import argparse
import json
import os
import re
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from .task import CANDIDATES, canonical_form, select_distinct, space_size

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# Apart from the study's held-out and training seeds, so the pilot's problems are a third draw.
PILOT_SEED = 30_000
EVAL_SEED = 10_000
MAX_NEW_TOKENS = 32
MIN_FORMAT_RATE = 0.9
MIN_FORMS = 1_000
PASS_RANGE = (0.1, 0.4)
MIN_MIXED_SHARE = 0.5
_ANSWER_LINE = re.compile(r"answer\s*:", re.IGNORECASE)


class FormatCounter:
    """Wraps a `ReasoningGymReward`: scores as it does and counts completions with an `Answer:` line; keeps a few
    completions to show."""

    def __init__(self, reward_func, keep: int = 4):
        self.reward_func, self.keep = reward_func, keep
        self.samples = self.formatted = 0
        self.examples: list[str] = []

    def score(self, text: str, index: int) -> float:
        self.samples += 1
        self.formatted += bool(_ANSWER_LINE.search(text))
        if len(self.examples) < self.keep:
            self.examples.append(text)
        return self.reward_func.score(text, index)


def pilot_source(task: str, config: dict, prompts: int, seed: int = PILOT_SEED):
    """`prompts` problems of distinct canonical form drawn with `seed`, the worked example's form left out, as a
    `ReasoningGymSource` in the example's prompt format."""
    import dataclasses

    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import reasoning_gym_source

    example = task_example(task, config)
    source = reasoning_gym_source(task, config, size=20 * prompts, seed=seed, example=example)
    forms = [canonical_form(source.procedural_dataset[int(row)]["metadata"]["expression"])
             for row in source.dataset["reasoning_gym_index"]]
    keep = select_distinct(forms, prompts, exclude=[canonical_form(example["metadata"]["expression"])])
    if len(keep) < prompts:
        raise ValueError(f"pilot_source: only {len(keep)} distinct problems of {task} {config}; asked {prompts}.")
    return dataclasses.replace(source, dataset=source.dataset.select(keep),
                               questions=[source.questions[i] for i in keep]), example


def spread(per_prompt: list[int], k: int) -> dict:
    rates = [count / k for count in per_prompt]
    mixed = sum(0 < count < k for count in per_prompt)
    return {
        "per_prompt_sd": statistics.stdev(rates),
        "histogram": [per_prompt.count(count) for count in range(k + 1)],
        "mixed_share": mixed / len(per_prompt),
        "quartiles": statistics.quantiles(rates, n=4),
        "informative_group_probability": statistics.fmean(1 - r**k - (1 - r) ** k for r in rates),
    }


def qualifies(row: dict) -> list[str]:
    """Why a measured candidate fails the rule (empty: it qualifies)."""
    reasons = []
    if not PASS_RANGE[0] <= row["pass_rate"] <= PASS_RANGE[1]:
        reasons.append(f"pass rate {row['pass_rate']:.3f} outside {PASS_RANGE}")
    if row["mixed_share"] < MIN_MIXED_SHARE:
        reasons.append(f"only {row['mixed_share']:.2f} of prompts neither always right nor always wrong")
    if row["format_rate"] < MIN_FORMAT_RATE:
        reasons.append(f"format followed in {row['format_rate']:.2f} of samples")
    if row["canonical_forms"] < MIN_FORMS:
        reasons.append(f"{row['canonical_forms']} canonical forms")
    return reasons


def choose(rows: list[dict]) -> str | None:
    eligible = [row for row in rows if not row["fails"]]
    if not eligible:
        return None
    best = max(eligible, key=lambda row: (row["mixed_share"], -abs(row["pass_rate"] - 0.25)))
    return best["name"]


def measure(name: str, model, tokenizer, prompts: int, samples: int) -> dict:
    import dataclasses

    from trl_variants.real.evaluation import sampled_pass_rate

    task, config = CANDIDATES[name]
    source, example = pilot_source(task, config, prompts)
    counter = FormatCounter(source.reward_func)
    source = dataclasses.replace(source, reward_func=counter)
    load_before = os.getloadavg()
    cpu_started = time.process_time()
    result = sampled_pass_rate(model, tokenizer, source, samples, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                               seed=EVAL_SEED)
    cpu_seconds = time.process_time() - cpu_started
    questions, forms = space_size(config)
    row = {
        "name": name, "task": task, "config": config, "prompts": result.prompts, "samples_per_prompt": samples,
        "pass_rate": result.pass_rate, "mean_score": result.mean_score, "per_prompt": result.per_prompt,
        "always_right": result.always_right, "always_wrong": result.always_wrong,
        **spread(result.per_prompt, samples),
        "format_rate": counter.formatted / counter.samples,
        "mean_completion_tokens": result.mean_completion_tokens, "truncated_fraction": result.truncated_fraction,
        "distinct_questions": questions, "canonical_forms": forms,
        "worked_example": {"question": example["question"], "reply": example["reply"]},
        "example_completions": counter.examples,
        "seconds": result.seconds, "cpu_seconds": round(cpu_seconds, 1),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
    }  # fmt: skip
    row["fails"] = qualifies(row)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=56)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--candidates", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--output", default=os.path.join(RESULTS, "pilot.json"))
    args = parser.parse_args()
    import torch

    from trl_variants.machine import describe_machine
    from trl_variants.real.smollm2 import load_smollm2

    torch.set_num_threads(1)
    model, tokenizer = load_smollm2()
    record = {"machine": describe_machine(), "threads": 1, "rule": __doc__.split("Rule, ")[1].strip(),
              "candidates": []}
    previous = json.load(open(args.output, encoding="utf-8")) if os.path.isfile(args.output) else None
    done = {row["name"]: row for row in (previous or {}).get("candidates", [])}
    for name in args.candidates:
        row = done.get(name) or measure(name, model, tokenizer, args.prompts, args.samples)
        record["candidates"].append(row)
        print(f"{name}: pass {row['pass_rate']:.3f}, mixed {row['mixed_share']:.2f}, format {row['format_rate']:.2f}, "
              f"histogram {row['histogram']}, {row['seconds']} s ({row['cpu_seconds']} CPU s), load "
              f"{row['load_average_before'][0]:.1f}", flush=True)
        record["chosen"] = choose(record["candidates"])
        with open(args.output, "w", encoding="utf-8") as handle:  # after each candidate: an interrupted pilot resumes
            json.dump(record, handle, indent=1)
    print(f"chosen: {record['chosen']}")
    training = os.path.join(os.path.dirname(args.output), "training_pilot.json")
    training_record = json.load(open(training, encoding="utf-8")) if os.path.isfile(training) else None
    with open(os.path.splitext(args.output)[0] + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(record, training_record))


def markdown(record: dict, training: dict | None) -> str:
    """The pilot's short report: one row per candidate, the choice, and the training pilot if it ran."""
    lines = ["# Real-model study: pilot", "",
             "Written by `python -m benchmarks.real_model_study.pilot` (and `training_pilot.py`) before any arm of "
             "the study ran. SmolLM2-135M-Instruct at step 0, temperature 1.0, at most 32 new tokens, the "
             "real-model example's prompt (one worked exchange), one torch thread.", "",
             "Rule, " + " ".join(record["rule"].split()), "",
             "| candidate | prompts x samples | pass rate | per-prompt SD | prompts by passes (0..k) | neither always "
             "right nor wrong | P(group informative) | `Answer:` line | truncated | questions / canonical forms | "
             "CPU s (wall s, load before) | fails |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in record["candidates"]:
        lines.append(
            f"| {row['name']} | {row['prompts']} x {row['samples_per_prompt']} | {row['pass_rate']:.3f} | "
            f"{row['per_prompt_sd']:.3f} | {' '.join(map(str, row['histogram']))} | {row['mixed_share']:.2f} | "
            f"{row['informative_group_probability']:.2f} | {row['format_rate']:.2f} | "
            f"{row['truncated_fraction']:.3f} | {row['distinct_questions']} / {row['canonical_forms']} | "
            f"{row['cpu_seconds']:.0f} ({row['seconds']:.0f}, {row['load_average_before'][0]:.1f}) | "
            f"{'; '.join(row['fails']) or 'qualifies'} |"
        )
    lines += ["", f"**Chosen: {record['chosen'] or 'none qualifies'}.**", ""]
    if training is not None:
        per_step = training["step_cpu_seconds"]
        lines += ["## Training pilot (`GRPOTrainer`, not an arm of the study)", "",
                  f"{training['candidate']}: {training['train_size']} training problems, 2 prompts x 8 completions "
                  f"a step, lr 1e-5, {len(per_step)} of {training['steps']} steps done; held-out: the pilot's "
                  f"{training['held_out_prompts']} problems x {training['samples']} samples.", "",
                  "| step | " + " | ".join(map(str, training["eval_steps"])) + " |",
                  "| --- |" + " --- |" * len(training["eval_steps"]),
                  "| held-out pass rate | " + " | ".join(f"{value:.3f}" for value in training["accuracy"]) + " |",
                  "| always right / always wrong | " + " | ".join(
                      f"{right} / {wrong}" for right, wrong in zip(training["always_right"], training["always_wrong"],
                                                                  strict=True)) + " |",
                  "| evaluation CPU s | " + " | ".join(f"{value:.0f}" for value in training["eval_cpu_seconds"]) + " |",
                  "", f"CPU seconds per optimizer step: mean {statistics.fmean(per_step):.1f} (min {min(per_step):.1f}, "
                  f"max {max(per_step):.1f}); wall seconds per step: mean "
                  f"{statistics.fmean(training['step_wall_seconds']):.0f}; load average (1 min) at the evaluations: "
                  + ", ".join(f"{load[0]:.1f}" for load in training["load_average"]) + ".", ""]
    lines += [f"Machine: {record['machine']}, shared with other work while measured (load averages above).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
