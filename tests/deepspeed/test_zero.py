"""The package's trainers under DeepSpeed ZeRO-2 and ZeRO-3 on two CPU processes, launched as a user launches them:
`accelerate launch` with TRL's zero2/zero3 accelerate config (launch.py). One launch per stage runs every
configuration of tests/deepspeed/scripts/zero_runs.py in turn; each rank records its engine, weights, logs and
dynamic-sampling steps.

Every run must really train under DeepSpeed (a `DeepSpeedEngine` of the stage on both ranks, weights changed and
equal on both), train exactly the groups the single-process decision picks from every row's scores
(tests/dynamic_sampling/trained_groups.py), and, resumed mid-run from a checkpoint that holds the dynamic-sampling
state and the carried groups, log exactly what the uninterrupted run logged. The uneven ZeRO-3 run must finish
within the launch's timeout: any forward, generation step or reward-model call made on one process and not the
other would hang it.
"""

import json
import time
from pathlib import Path

import pytest

from trl_variants.dynamic_sampling.carry_checkpoint import CARRIED_FILE, CARRIED_RANK_FILE
from trl_variants.dynamic_sampling.skipping_trainer import HISTORY_FILE
from trl_variants.dynamic_sampling.trainer import STATE_FILE
from trl_variants.reliability.checkpoints import checkpoint_problems

from ..dynamic_sampling.trained_groups import expected_trained, trained
from ..helpers import TEST_DEFAULTS
from .launch import SCRIPTS, deepspeed_test, run_zero

pytestmark = deepspeed_test

SCRIPT = SCRIPTS / "zero_runs.py"
G = 4
PER_DEVICE_BATCH = 8
UNEVEN_PER_DEVICE_BATCH = 6
STEPS, RESUME_STEPS, SAVE_STEPS = 3, 5, 2
RUNS = {
    2: ("defaults", "resumed"),
    3: ("defaults", "resumed", "published", "dr_grpo", "reward_model", "lora", "uneven"),
}
# Generous for a loaded 2-core machine (about 80 s unloaded for ZeRO-3's seven runs, plus DeepSpeed's one-time
# build of its communication op, about 80 s, when no earlier run built it); a hang is killed here.
LAUNCH_TIMEOUT_S = 480
STAGE_RUNS = [(stage, run) for stage, runs in RUNS.items() for run in runs]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`launched(stage)`: every run's per-rank records of the stage's one launch, made on first use."""
    records = {}

    def launch(stage: int) -> dict:
        if stage not in records:
            out_dir = tmp_path_factory.mktemp(f"zero{stage}")
            started = time.monotonic()
            run_zero(stage, SCRIPT, out_dir, LAUNCH_TIMEOUT_S, "--runs", ",".join(RUNS[stage]))
            print(f"ZeRO-{stage} launch ({len(RUNS[stage])} runs): {time.monotonic() - started:.0f} s")
            records[stage] = {
                run: [json.loads((out_dir / f"{run}_rank{rank}.json").read_text()) for rank in range(2)]
                for run in RUNS[stage]
            }
            records[stage]["dir"] = out_dir
        return records[stage]

    return launch


def batch_groups(run: str) -> int:
    return 2 * (UNEVEN_PER_DEVICE_BATCH if run == "uneven" else PER_DEVICE_BATCH) // G


@pytest.mark.parametrize("stage, run", STAGE_RUNS, ids=[f"zero{stage}-{run}" for stage, run in STAGE_RUNS])
def test_both_ranks_train_under_a_deepspeed_engine(launched, stage, run):
    ranks = launched(stage)[run]
    for rank, record in enumerate(ranks):
        assert record["rank"] == rank and record["num_processes"] == 2
        assert record["distributed_type"] == "DistributedType.DEEPSPEED"
        assert record["engine"] == "DeepSpeedEngine" and record["zero_stage"] == stage
        assert record["global_step"] == (RESUME_STEPS if run in ("defaults", "resumed") else STEPS)
        # ZeRO-3 partitions every parameter (launch script: partition_every_parameter), so that every forward is a
        # collective; ZeRO-2 leaves parameters whole.
        assert record["persistent"] == []
        assert record["partitioned"] == (list(record["weights_before"]) if stage == 3 else [])
    first, second = ranks
    assert first["logs"] == second["logs"]
    # Gathered whole on each rank: the ranks hold one model, and training changed it.
    assert first["weights_after"] == second["weights_after"]
    before, after = first["weights_before"], first["weights_after"]
    changed = {name for name in before if before[name] != after[name]}
    if run == "lora":
        assert changed and all("lora_" in name for name in changed), "LoRA must train its adapters only"
    elif run != "resumed":  # a resumed run starts from the checkpoint's weights, not these
        assert changed == set(before)


@pytest.mark.parametrize(
    "stage, run",
    [(stage, run) for stage, run in STAGE_RUNS if run not in ("resumed", "dr_grpo")],
    ids=[f"zero{stage}-{run}" for stage, run in STAGE_RUNS if run not in ("resumed", "dr_grpo")],
)
def test_ranks_train_the_groups_of_the_single_process_decision(launched, stage, run):
    ranks = launched(stage)[run]
    steps = len(ranks[0]["steps"])
    assert steps == ranks[0]["global_step"]
    for step in range(steps):
        assert trained(ranks, step) == expected_trained(ranks, step, G, batch_groups(run), carry=run != "published")
    logs = ranks[0]["logs"]
    if run == "published":
        assert all("dynamic_sampling/carried_groups" not in entry for entry in logs)
        assert all(entry.get("dynamic_sampling/skipped_prompts", 0) == 0 for entry in logs)
    else:
        # With carrying (a default) and skipping (turned on), both must have acted in the run.
        assert sum(entry["dynamic_sampling/carried_groups"] for entry in logs) > 0
        if run != "uneven":
            assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in logs) > 0


@pytest.mark.parametrize("stage", RUNS)
def test_a_resume_from_a_mid_run_checkpoint_logs_what_the_uninterrupted_run_did(launched, stage):
    records = launched(stage)
    checkpoint = Path(records["dir"]) / "defaults" / f"checkpoint-{SAVE_STEPS}"
    assert checkpoint_problems(str(checkpoint)) == []
    names = {path.name for path in checkpoint.iterdir()}
    # DeepSpeed's own checkpoint (engine, ZeRO partitions of the optimizer) beside the package's state.
    assert f"global_step{SAVE_STEPS}" in names
    carried_files = {CARRIED_FILE, *(CARRIED_RANK_FILE.format(rank=rank) for rank in range(2))}
    assert {STATE_FILE, HISTORY_FILE, *carried_files} <= names
    for uninterrupted, resumed in zip(records["defaults"], records["resumed"], strict=True):
        assert [step["global_step"] for step in resumed["steps"]] == list(range(SAVE_STEPS, RESUME_STEPS))
        assert resumed["steps"][0]["carried_groups"] > 0, "the checkpoint must be taken while groups are carried"
        for before, after in zip(uninterrupted["steps"][SAVE_STEPS:], resumed["steps"], strict=True):
            assert after["trained"] == before["trained"]
        # Exactly equal: weights, ZeRO optimizer partitions, RNG, data order and dynamic-sampling state restored.
        assert resumed["logs"] == uninterrupted["logs"]
        assert resumed["weights_after"] == uninterrupted["weights_after"]


def test_zero3_prepares_the_reward_model_with_deepspeed(launched):
    for record in launched(3)["reward_model"]:
        assert record["reward_engines"] == ["HalfDegenerateReward", "DeepSpeedEngine"]
        assert all("rewards/reward_model/mean" in entry for entry in record["logs"])


def test_zero3_with_uneven_work_finishes_and_trains_the_decision(launched):
    """Groups straddle the processes; rank 0's groups are all degenerate, so rank 1 alone finds informative ones,
    refill rounds are needed and the surplus lands on one rank; rank 1 decodes every completion to the limit while
    rank 0 stops early. The launch finished within its timeout (hang-free), and the decision is checked above."""
    first, second = launched(3)["uneven"]
    limit = TEST_DEFAULTS["max_completion_length"]
    assert any(entry["dynamic_sampling/rounds"] > 1 for entry in first["logs"])
    for step in first["steps"]:
        # Rank 0's own groups: all degenerate.
        assert all(share[2] == 0 for share in step["shares"] if share[0] == 0)
    lengths = [
        [len(completion) for step in rank["steps"] for _, completion in step["generated"].values()]
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
