"""A reward failure on one of two processes stops both promptly, each with its own clear error."""

import json
import os
import re
import subprocess
import time

import pytest

from ..helpers import two_process_command

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "reward_failure_on_one_rank.py")
TIMEOUT_S = 90


@pytest.mark.multiprocess
def test_reward_failure_on_rank_1_stops_both_ranks_with_clear_errors(tmp_path):
    environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = two_process_command(SCRIPT, tmp_path)
    started = time.monotonic()
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=TIMEOUT_S)
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr

    assert result.returncode != 0, output[-3000:]
    assert elapsed < TIMEOUT_S
    # torchrun lists every process that exited non-zero. Which of the two exits first is a race; torchrun then
    # stops the other (exit code -15), so the codes themselves are not compared.
    for rank in (0, 1):
        exit_code = re.search(rf"rank\s*:\s*{rank} \(local_rank: {rank}\)\s*exitcode\s*:\s*(-?\d+)", output)
        assert exit_code and int(exit_code.group(1)) != 0, output[-3000:]

    # Each process stopped on its own clear error, within seconds of the other: neither hung in a collective nor
    # died of the other's broken connection.
    failing = json.loads((tmp_path / "rank1.json").read_text())
    waiting = json.loads((tmp_path / "rank0.json").read_text())
    assert failing["error"] == (
        "RewardFunctionError: Reward function 'flaky_reward' raised ZeroDivisionError: simulated bug in the reward"
    )
    # The original exception is chained: its traceback comes first, before "The above exception was the direct cause".
    cause_part = failing["traceback"].split("The above exception was the direct cause")[0]
    assert "ZeroDivisionError: simulated bug in the reward" in cause_part
    assert waiting["error"].startswith(
        "RewardFunctionError: Stopping because a reward function failed on process(es) [1]; that process's error "
        "above names the function, the value and the sample."
    ), waiting["error"]
    assert abs(failing["time"] - waiting["time"]) < 10
