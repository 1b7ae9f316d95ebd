"""Run with `ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 reward_failure_on_one_rank.py OUT_DIR`.

The reward function raises on process 1 only, at the first batch. Each process writes the exception that ended it
and the time to OUT_DIR/rank<N>.json, then exits with status 3, so the test can tell a process that stopped on its
own error from one killed by the launcher or left hanging. torchrun stops the remaining processes as soon as one
exits, so each process waits (at most PEER_WAIT_S) for the other's report before exiting; a process that never
reports, because it hangs, is still stopped by torchrun after that wait.
"""

import json
import os
import sys
import time
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"

from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task, toy_accuracy_reward  # noqa: E402

EXIT_STATUS_ON_ERROR = 3
PEER_WAIT_S = 30


def flaky_reward(completions, answer, **kwargs):
    if int(os.environ["RANK"]) == 1:
        raise ZeroDivisionError("simulated bug in the reward")
    return toy_accuracy_reward(completions, answer)


def main(out_dir: str) -> None:
    task = make_toy_task(seed=0, warm_start_steps=0)
    config = DAPOConfig(
        os.path.join(out_dir, "run"),
        use_cpu=True,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=4,
        max_steps=2,
        report_to=[],
        save_strategy="no",
        seed=0,
    )
    trainer = DAPOTrainer(
        task.model,
        [flaky_reward],
        args=config,
        train_dataset=task.train_dataset,
        processing_class=task.tokenizer,
    )
    trainer.train()


def report(out_dir: str, rank: int, error: Exception | None) -> None:
    content = {"time": time.time(), "error": None, "traceback": None}
    if error is not None:
        content["error"] = f"{type(error).__name__}: {error}"
        content["traceback"] = "".join(traceback.format_exception(error))
    # Written under a temporary name and renamed, so a reader never sees a partial report.
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as report_file:
        json.dump(content, report_file)
    os.replace(path + ".tmp", path)


def wait_for_peer_reports(out_dir: str) -> None:
    paths = [os.path.join(out_dir, f"rank{peer}.json") for peer in range(int(os.environ["WORLD_SIZE"]))]
    deadline = time.monotonic() + PEER_WAIT_S
    while not all(os.path.exists(path) for path in paths) and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    out_dir = sys.argv[1]
    rank = int(os.environ["RANK"])
    try:
        main(out_dir)
    except Exception as error:
        report(out_dir, rank, error)
        wait_for_peer_reports(out_dir)
        sys.exit(EXIT_STATUS_ON_ERROR)
    report(out_dir, rank, None)
    wait_for_peer_reports(out_dir)
