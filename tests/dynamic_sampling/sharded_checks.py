"""What every run of tests/dynamic_sampling/scripts/sharded_runs.py must show, whatever engine shards it (DeepSpeed
ZeRO in tests/deepspeed, FSDP in tests/fsdp): each check takes both ranks' records of one run."""

import json
import time
from pathlib import Path

from trl_variants.dynamic_sampling.checkpoint import CARRIED_FILE, STATE_FILE
from trl_variants.experimental.prompt_skipping.skipper import HISTORY_FILE
from trl_variants.reliability.checkpoints import checkpoint_problems

from ..helpers import TEST_DEFAULTS
from .scripts.sharded_runs import (
    NUM_GENERATIONS,
    PER_DEVICE_BATCH,
    RESUME_STEPS,
    SAVE_STEPS,
    STEPS,
    UNEVEN_PER_DEVICE_BATCH,
)
from .trained_groups import expected_trained

CHECKPOINTED = ("defaults", "resumed")


def read_records(out_dir: Path, runs) -> dict:
    """Both ranks' records of every run of a launch into `out_dir`, by run name, and the folder as "dir"."""
    records = {run: [json.loads((out_dir / f"{run}_rank{rank}.json").read_text()) for rank in range(2)] for run in runs}
    return {**records, "dir": out_dir}


def launches_on_first_use(tmp_path_factory, label: str, runs: dict, launch):
    """`launched(key)`: both ranks' records of every run of the launch for `key` (a ZeRO stage, an FSDP version),
    which runs `runs[key]`, made on first use by `launch(key, out_dir, *args)` and its time printed."""
    records = {}

    def launched(key) -> dict:
        if key not in records:
            out_dir = tmp_path_factory.mktemp(f"{label}{key}")
            started = time.monotonic()
            launch(key, out_dir, "--runs", ",".join(runs[key]))
            print(f"{label}{key} launch ({len(runs[key])} runs): {time.monotonic() - started:.0f} s")
            records[key] = read_records(out_dir, runs[key])
        return records[key]

    return launched


def check_both_ranks_trained_one_model(ranks, run: str) -> None:
    """Both ranks trained the steps asked, logged the same, and hold the same weights (read whole), changed by
    training: the adapters only under LoRA."""
    for rank, record in enumerate(ranks):
        assert record["rank"] == rank and record["num_processes"] == 2
        assert record["global_step"] == (RESUME_STEPS if run in CHECKPOINTED else STEPS)
    first, second = ranks
    assert first["logs"] == second["logs"]
    assert first["weights_after"] == second["weights_after"]
    before, after = first["weights_before"], first["weights_after"]
    changed = {name for name in before if before[name] != after[name]}
    if run == "lora":
        assert changed and all("lora_" in name for name in changed), "LoRA must train its adapters only"
    elif run != "resumed":  # a resumed run starts from the checkpoint's weights, not these
        assert changed == set(before)


def check_the_groups_of_the_single_process_decision(ranks, run: str) -> None:
    """Every step trained exactly the groups the single-process decision picks from every row's scores, each rank
    its slice of the batch in order, and the run's carrying and skipping acted (or, as published, never did)."""
    per_device = UNEVEN_PER_DEVICE_BATCH if run == "uneven" else PER_DEVICE_BATCH
    batch_groups = 2 * per_device // NUM_GENERATIONS
    steps = len(ranks[0]["steps"])
    assert steps == ranks[0]["global_step"]
    for step in range(steps):
        expected = expected_trained(ranks, step, NUM_GENERATIONS, batch_groups, carry=run != "published")
        assert [rank["steps"][step]["trained"] for rank in ranks] == expected
    logs = ranks[0]["logs"]
    if run == "published":
        assert all("dynamic_sampling/carried_groups" not in entry for entry in logs)
        assert all(entry.get("dynamic_sampling/skipped_prompts", 0) == 0 for entry in logs)
    else:
        # With carrying (a default) and skipping (turned on), both must have acted in the run.
        assert sum(entry["dynamic_sampling/carried_groups"] for entry in logs) > 0
        if run != "uneven":
            assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in logs) > 0


def check_the_resume_logs_the_uninterrupted_run(records, engine_files: set[str]) -> None:
    """The "defaults" run's step-2 checkpoint holds the engine's own files and the package's state, carried groups
    included; "resumed" from it trains and logs exactly what the uninterrupted run did and ends with its weights."""
    checkpoint = Path(records["dir"]) / "defaults" / f"checkpoint-{SAVE_STEPS}"
    assert checkpoint_problems(str(checkpoint)) == []
    assert {STATE_FILE, HISTORY_FILE, CARRIED_FILE, *engine_files} <= {path.name for path in checkpoint.iterdir()}
    for uninterrupted, resumed in zip(records["defaults"], records["resumed"], strict=True):
        assert [step["global_step"] for step in resumed["steps"]] == list(range(SAVE_STEPS, RESUME_STEPS))
        assert resumed["steps"][0]["carried_groups"] > 0, "the checkpoint must be taken while groups are carried"
        for before, after in zip(uninterrupted["steps"][SAVE_STEPS:], resumed["steps"], strict=True):
            assert after["trained"] == before["trained"]
        # Exactly equal: weights, optimizer state, RNG, data order and dynamic-sampling state restored.
        assert resumed["logs"] == uninterrupted["logs"]
        assert resumed["weights_after"] == uninterrupted["weights_after"]


def check_the_uneven_run(first, second) -> None:
    """Groups straddle the processes; rank 0's rows all score 0, so rank 1 alone finds informative groups,
    refill rounds are needed and the surplus lands on one rank; rank 1 decodes every completion to the limit while
    rank 0 stops early. The launch finished within its timeout (hang-free)."""
    limit = TEST_DEFAULTS["max_completion_length"]
    assert any(entry["dynamic_sampling/rounds"] > 1 for entry in first["logs"])
    for step in first["steps"]:
        # Rank 0's own rows all score 0, so its groups are degenerate.
        assert all(step["rewards"][number] == [0.0] for number in step["own"])
    lengths = [
        [len(step["generated"][number][1]) for step in rank["steps"] for number in step["own"]]
        for rank in (first, second)
    ]
    assert set(lengths[1]) == {limit} and min(lengths[0]) < limit
    # At some step one rank trains carried rows and the other holds none (the carried rows' log-prob pass runs on
    # both all the same).
    assert any(
        min(a["carried_in"], b["carried_in"]) == 0 and max(a["carried_in"], b["carried_in"]) > 0
        for a, b in zip(first["steps"], second["steps"], strict=True)
    )
    for a, b in zip(first["steps"], second["steps"], strict=True):
        assert len(a["trained"]) == len(b["trained"]) == UNEVEN_PER_DEVICE_BATCH
        # Six rows a process, groups of four: the batch's second group has two rows on each rank.
        assert {tuple(row[0]) for row in a["trained"][4:]} == {tuple(row[0]) for row in b["trained"][:2]}


def check_the_drop_run(first, second) -> None:
    """`dynamic_sampling="drop"`: one generate call of one generation batch per step on each rank, as `GRPOTrainer`
    makes, and only rank 1's informative groups kept (rank 0's rows are all flat); the launch finished, so rank 0,
    with nothing of its own to train, joined every collective forward and backward."""
    for rank in (first, second):
        assert rank["generate_rows"] == [PER_DEVICE_BATCH] * STEPS
        assert rank["steps"] == []  # no generation rounds
    # Rank 1's groups are informative for half the prompts; a step whose groups are all flat trains with loss 0.
    kept = [entry["dynamic_sampling/kept_rows_frac"] for entry in first["logs"]]
    assert len(kept) == STEPS and all(0 <= share <= 0.5 for share in kept) and max(kept) > 0, kept
    assert all(entry["loss"] == 0 for entry, share in zip(first["logs"], kept, strict=True) if share == 0)
