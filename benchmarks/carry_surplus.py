"""What carrying surplus informative groups (`dynamic_sampling_carry_surplus`) saves on the toy task.

    python benchmarks/carry_surplus.py [--steps 150] [--groups 8] [--seeds 0 1 2] [--smoke]

For each seed, the toy policy is warm-started as in benchmarks/dynamic_sampling.py (about half the groups
informative), then trained with dynamic sampling with and without carrying, from the same weights and seed. The
table gives, per run, the pass rate p, generated groups per trained group and that ratio times p (1.00 is the
floor: every informative group generated is trained), the informative groups dropped, the rounds per step and
the held-out greedy accuracy after training. The accuracy column is what decides whether carrying may be on by
default: it must not fall.
"""

import argparse
import copy
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch
from transformers import PrinterCallback, ProgressCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.toy import greedy_accuracy, make_toy_task

NUM_GENERATIONS = 4
WARM_START_STEPS = 200  # as benchmarks/dynamic_sampling.py: about half the groups informative


def run(task, carry: bool, steps: int, groups: int, seed: int, output_dir: str) -> dict:
    config = DAPOConfig(
        output_dir,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=groups * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=6,
        learning_rate=1e-3,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=seed,
        disable_tqdm=True,
        dynamic_sampling_carry_surplus=carry,
    )
    trainer = DAPOTrainer(
        copy.deepcopy(task.model), task.reward_funcs, args=config, train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )  # fmt: skip
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry]
    generated = sum(entry["dynamic_sampling/generated_groups"] for entry in logs)
    informative = sum(entry["dynamic_sampling/pass_rate"] * entry["dynamic_sampling/generated_groups"] for entry in logs)
    pass_rate = informative / generated
    per_trained = generated / (steps * groups)
    return {
        "seed": seed,
        "carry": carry,
        "pass_rate": pass_rate,
        "generated_per_trained": per_trained,
        "times_pass_rate": per_trained * pass_rate,
        "dropped": sum(entry["dynamic_sampling/dropped_informative_groups"] for entry in logs) / max(informative, 1),
        "rounds": sum(entry["dynamic_sampling/rounds"] for entry in logs) / len(logs),
        "accuracy": greedy_accuracy(trainer.model, task.tokenizer, task.eval_problems),
    }


def table(results: list[dict]) -> str:
    lines = [
        "| seed | carry | pass rate p | generated / trained | x p | informative dropped | rounds / step | held-out accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['seed']} | {'on' if r['carry'] else 'off'} | {r['pass_rate']:.3f} | {r['generated_per_trained']:.2f} "
            f"| {r['times_pass_rate']:.3f} | {r['dropped']:.1%} | {r['rounds']:.2f} | {r['accuracy']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per run")
    parser.add_argument("--groups", type=int, default=8, help="prompt groups per step")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--smoke", action="store_true", help="a tiny run that only checks the script works")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds, warm_start = 3, [0], 10
    else:
        warm_start = WARM_START_STEPS
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory() as work_dir:
        for seed in args.seeds:
            task = make_toy_task(seed=seed, warm_start_steps=warm_start)
            for carry in (False, True):
                results.append(run(task, carry, args.steps, args.groups, seed, os.path.join(work_dir, f"{seed}-{carry}")))
    print(f"{args.groups} groups per step, {args.steps} steps\n")
    print(table(results))


if __name__ == "__main__":
    main()
