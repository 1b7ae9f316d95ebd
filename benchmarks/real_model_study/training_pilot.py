"""Training pilot of the real-model study: one short `GRPOTrainer` run on the task the pilot chose, with the study's
batch shape and a training set as small as the study's, to see whether the held-out pass rate still rises at the
run's length, and what an optimizer step costs at one torch thread. Not an arm of the study: its held-out problems
are the pilot's draw (seed `pilot.PILOT_SEED`), not the study's.

    python -m benchmarks.real_model_study.training_pilot [--steps 15] [--eval-every 5] [--train-size 10]

Writes `results/training_pilot.json` after every evaluation.
"""

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from .pilot import EVAL_SEED, MAX_NEW_TOKENS, PILOT_SEED, RESULTS, pilot_source
from .task import CANDIDATES, canonical_form, select_distinct

TRAIN_SEED = 0


def training_source(task: str, config: dict, size: int, exclude_forms: set, seed: int = TRAIN_SEED):
    """`size` problems of distinct canonical form drawn with `seed`, none of whose form is in `exclude_forms`."""
    import dataclasses

    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import reasoning_gym_source

    example = task_example(task, config)
    source = reasoning_gym_source(task, config, size=50 * size, seed=seed, example=example)
    forms = [canonical_form(source.procedural_dataset[int(row)]["metadata"]["expression"])
             for row in source.dataset["reasoning_gym_index"]]
    keep = select_distinct(forms, size, exclude=exclude_forms | {canonical_form(example["metadata"]["expression"])})
    return dataclasses.replace(source, dataset=source.dataset.select(keep),
                               questions=[source.questions[i] for i in keep]), [forms[i] for i in keep]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default=None, help="a name of task.CANDIDATES (default: the pilot's choice)")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=10)
    parser.add_argument("--held-out", type=int, default=150)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--output", default=os.path.join(RESULTS, "training_pilot.json"))
    args = parser.parse_args()

    import torch
    from transformers import TrainerCallback
    from transformers import logging as transformers_logging
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants.machine import describe_machine
    from trl_variants.real.evaluation import sampled_pass_rate
    from trl_variants.real.smollm2 import load_smollm2

    torch.set_num_threads(1)
    transformers_logging.set_verbosity_error()
    name = args.candidate
    if name is None:
        with open(os.path.join(RESULTS, "pilot.json"), encoding="utf-8") as handle:
            name = json.load(handle)["chosen"]
    task, config = CANDIDATES[name]
    held_out, _ = pilot_source(task, config, args.held_out, seed=PILOT_SEED)
    held_out_forms = {canonical_form(entry["metadata"]["expression"]) for entry in
                      (held_out.procedural_dataset[int(row)] for row in held_out.dataset["reasoning_gym_index"])}
    train, train_forms = training_source(task, config, args.train_size, held_out_forms)
    model, tokenizer = load_smollm2()
    record = {"candidate": name, "task": task, "config": config, "machine": describe_machine(), "threads": 1,
              "steps": args.steps, "train_size": len(train.dataset), "train_questions": train.questions,
              "held_out_prompts": len(held_out.dataset), "samples": args.samples, "eval_steps": [], "accuracy": [],
              "always_right": [], "always_wrong": [], "eval_cpu_seconds": [], "step_cpu_seconds": [],
              "step_wall_seconds": [], "logged": {}, "load_average": []}

    def write():
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)

    def evaluate(current_model, step):
        started = time.process_time()
        result = sampled_pass_rate(current_model, tokenizer, held_out, args.samples, max_new_tokens=MAX_NEW_TOKENS,
                                   temperature=1.0, seed=EVAL_SEED + len(record["eval_steps"]))
        for key, value in (("eval_steps", step), ("accuracy", result.pass_rate),
                           ("always_right", result.always_right), ("always_wrong", result.always_wrong),
                           ("eval_cpu_seconds", round(time.process_time() - started, 1)),
                           ("load_average", os.getloadavg())):
            record[key].append(value)
        print(f"step {step}: held-out {result.pass_rate:.3f} ({record['eval_cpu_seconds'][-1]} CPU s, load "
              f"{os.getloadavg()[0]:.1f})", flush=True)
        write()

    class Clock(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kwargs):
            self.cpu, self.wall = time.process_time(), time.perf_counter()

        def on_step_end(self, args_, state, control, model=None, **kwargs):
            record["step_cpu_seconds"].append(round(time.process_time() - self.cpu, 2))
            record["step_wall_seconds"].append(round(time.perf_counter() - self.wall, 2))
            if state.global_step % args.eval_every == 0 or state.global_step == args.steps:
                evaluate(model, state.global_step)

        def on_log(self, args_, state, control, logs=None, **kwargs):
            for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length",
                        "completions/clipped_ratio"):
                if key in (logs or {}):
                    record["logged"].setdefault(key, {})[str(state.global_step)] = logs[key]

    evaluate(model, 0)
    config_ = GRPOConfig(
        os.path.join("/tmp", "real_model_study_training_pilot"), use_cpu=True, bf16=False,
        per_device_train_batch_size=16, num_generations=8, max_completion_length=MAX_NEW_TOKENS, learning_rate=1e-5,
        lr_scheduler_type="constant", warmup_steps=0, max_steps=args.steps, logging_steps=1, report_to=[],
        disable_tqdm=True, seed=TRAIN_SEED, save_strategy="no",
    )  # fmt: skip
    trainer = GRPOTrainer(model, [train.reward_func], args=config_, train_dataset=train.dataset,
                          processing_class=tokenizer, callbacks=[Clock()])
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    steps = record["step_cpu_seconds"]
    record["train_cpu_seconds_per_step"] = sum(steps) / len(steps)
    record["complete"] = True
    write()
    print(f"CPU seconds per step: {record['train_cpu_seconds_per_step']:.1f}")


if __name__ == "__main__":
    main()
