"""A runner with the command line `benchmarks.shared.process_grid` drives (`run --arm A --seed S ...`), for its
tests: it appends when it started and ended to a journal, then exits by its arm: `fail` exits 3, `hang` sleeps past
any deadline, every other arm sleeps `--seconds` and exits 0."""

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--arm", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--deadline_unix", type=float, default=None)
    cli = parser.parse_args()
    started = time.time()
    print(f"{cli.arm} seed {cli.seed} running", flush=True)
    time.sleep(600 if cli.arm == "hang" else cli.seconds)
    with open(cli.journal, "a") as journal:
        journal.write(json.dumps({"name": f"{cli.arm}-seed{cli.seed}", "started": started, "ended": time.time(),
                                  "deadline_unix": cli.deadline_unix}) + "\n")
    return 3 if cli.arm == "fail" else 0


if __name__ == "__main__":
    sys.exit(main())
