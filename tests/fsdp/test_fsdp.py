"""The package's trainers under FSDP2 and FSDP1 on two CPU processes, launched as a user launches them: `accelerate
launch` with TRL's fsdp2/fsdp1 accelerate config (launch.py), the training script overriding accelerate where CPU
processes require it (scripts/fsdp_runs.py says how and why). One launch per version runs every configuration of
tests/dynamic_sampling/scripts/sharded_runs.py asked of it in turn; each rank records its FSDP wrapping, weights,
logs and dynamic-sampling steps.

Every run must really train under FSDP of its version (FSDP2: every parameter a DTensor sharded over both ranks;
FSDP1: every flat parameter sharded), log the same and hold the same changed weights on both ranks, train exactly
the groups the single-process decision picks (tests/dynamic_sampling/sharded_checks.py), and, resumed from a
checkpoint taken while groups are carried, log exactly what the uninterrupted run logged. Two more launches end on
purpose: a forward of the sharded policy on one rank only must hang (so the forwards above really were
collectives), and an out-of-memory error in one rank's generate call must end the launch promptly with the message
that names the cap.
"""

import re
import time

import pytest

from ..dynamic_sampling.scripts.sharded_runs import GENERATE_CALL_CAP, PER_DEVICE_BATCH
from ..dynamic_sampling.sharded_checks import (
    check_both_ranks_trained_one_model,
    check_the_groups_of_the_single_process_decision,
    check_the_drop_run,
    check_the_resume_logs_the_uninterrupted_run,
    check_the_uneven_run,
    launches_on_first_use,
)
from ..helpers import HANG_MESSAGE
from .launch import SCRIPTS, fsdp_test, launch_fsdp, run_fsdp
from .scripts.fsdp_runs import FORWARD_FINISHED, FORWARD_STARTED

pytestmark = fsdp_test

SCRIPT = SCRIPTS / "fsdp_runs.py"
RUNS = {
    2: ("defaults", "resumed", "published", "dr_grpo", "capped", "reward_model", "lora", "uneven", "planned", "bf16",
        "drop"),
    1: ("defaults", "resumed"),
}
# Generous for a loaded 2-core machine (FSDP2's eight runs took about 30 s at load 6); a hang is killed here.
LAUNCH_TIMEOUT_S = 300
# The one-rank forward's launch must reach that forward (one training step, about 15 s at load 6) before this.
ONE_RANK_FORWARD_TIMEOUT_S = 60
OUT_OF_MEMORY_TIMEOUT_S = 120
VERSION_RUNS = [(version, run) for version, runs in RUNS.items() for run in runs]
DECIDED = [(version, run) for version, run in VERSION_RUNS if run not in ("resumed", "dr_grpo", "drop")]


def ids(pairs):
    return [f"fsdp{version}-{run}" for version, run in pairs]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`launched(version)`: every run's per-rank records of the version's one launch, made on first use."""

    def launch(version, out_dir, *args):
        run_fsdp(version, SCRIPT, out_dir, LAUNCH_TIMEOUT_S, *args)

    return launches_on_first_use(tmp_path_factory, "fsdp", RUNS, launch)


@pytest.mark.parametrize("version, run", VERSION_RUNS, ids=ids(VERSION_RUNS))
def test_both_ranks_train_under_fsdp_of_the_version(launched, version, run):
    ranks = launched(version)[run]
    for record in ranks:
        assert record["distributed_type"] == "DistributedType.FSDP" and record["fsdp_version"] == version
        if version == 2:
            # Every parameter (LoRA's adapters included) a DTensor, sharded on dim 0 over both ranks.
            assert record["wrapper"] == "FSDP2"
            assert record["dtensors"] == record["sharded"] == len(record["parameters"])
            assert record["dtensor_placements"] == ["(Shard(dim=0),)"]
        else:
            assert record["wrapper"] == "FullyShardedDataParallel" and record["dtensors"] == 0
            assert record["flat_parameters"] > 0 and record["flat_sharded"] == record["flat_parameters"]
    check_both_ranks_trained_one_model(ranks, run)


def test_fsdp2_trains_a_float32_policy_under_bf16_mixed_precision(launched):
    """Mixed precision on (the other runs compare ranks exactly in fp32): the float32 policy trains under bf16."""
    for record in launched(2)["bf16"]:
        assert record["mixed_precision"] == "bf16"
    assert all(record["mixed_precision"] == "no" for record in launched(2)["defaults"])


@pytest.mark.parametrize("version, run", DECIDED, ids=ids(DECIDED))
def test_ranks_train_the_groups_of_the_single_process_decision(launched, version, run):
    check_the_groups_of_the_single_process_decision(launched(version)[run], run)


@pytest.mark.parametrize("version", RUNS)
def test_a_resume_from_a_mid_run_checkpoint_logs_what_the_uninterrupted_run_did(launched, version):
    # FSDP's own checkpoint as TRL's YAMLs ask (FULL_STATE_DICT: the model and optimizer gathered whole).
    check_the_resume_logs_the_uninterrupted_run(launched(version), {"pytorch_model_fsdp.bin", "optimizer.bin"})


def test_fsdp2_generates_in_calls_of_at_most_the_cap(launched):
    records = launched(2)
    for first, second in (records["capped"], records["defaults"]):
        assert first["generate_rows"] == second["generate_rows"]
    capped = records["capped"][0]["generate_rows"]
    assert set(capped) == {GENERATE_CALL_CAP}
    # The defaults on CPU (no memory reading, no plan): calls of one generation batch, GRPOTrainer's call, and a
    # round larger than that split alike on both ranks.
    defaults = records["defaults"][0]
    assert max(defaults["generate_rows"]) == PER_DEVICE_BATCH
    assert len(defaults["generate_rows"]) > sum(entry["dynamic_sampling/rounds"] for entry in defaults["logs"])


def test_fsdp2_processes_agree_on_the_memory_plan_before_generating(launched):
    """Rank 0's free memory fits one generation batch per call, rank 1's three: both make rank 0's calls, so no
    process needs a retry it could not make alone, and a round larger than a batch is split on both alike."""
    rank0, rank1 = launched(2)["planned"]
    assert rank0["generate_rows"] == rank1["generate_rows"]
    assert max(rank0["generate_rows"]) == PER_DEVICE_BATCH
    rounds = sum(entry["dynamic_sampling/rounds"] for entry in rank0["logs"])
    assert len(rank0["generate_rows"]) > rounds, "a round larger than the cap must have been split for the plan to act"


def test_fsdp2_reward_model_is_prepared_whole_on_every_rank(launched):
    """TRL prepares a reward model with `accelerator.prepare_model(..., evaluation_mode=True)`, which under FSDP
    places it on the device without sharding it: every rank holds it whole, and scores its own rows alone."""
    for record in launched(2)["reward_model"]:
        assert record["reward_engines"] == ["HalfDegenerateReward", "Qwen2ForSequenceClassification"]
        assert record["reward_wrappers"] == record["reward_engines"]
        assert all("rewards/reward_model/mean" in entry for entry in record["logs"])


def test_fsdp2_with_uneven_work_finishes_and_trains_the_decision(launched):
    """The decision is checked above; generating under FSDP, transformers' `generate` keeps rank 0 stepping (with
    `synced_gpus`) until rank 1 has decoded to the limit, each step a collective."""
    check_the_uneven_run(*launched(2)["uneven"])


def test_fsdp2_drop_trains_with_a_rank_whose_rows_are_all_flat(launched):
    check_the_drop_run(*launched(2)["drop"])


def test_a_sharded_forward_on_one_rank_only_hangs(tmp_path):
    """Rank 1 runs a forward of the trained FSDP2 policy that rank 0 does not join (rank 0 waits for rank 1's
    report without any collective): the forward must gather parameters from rank 0 and never finish, so the
    launch's timeout ends it. Run as plain data parallel (no override), the same forward finished."""
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match=HANG_MESSAGE) as failure:
        run_fsdp(2, SCRIPT, tmp_path, ONE_RANK_FORWARD_TIMEOUT_S, "--runs", "one_rank_forward")
    print(f"FSDP2 one-rank forward launch, ended by its timeout: {time.monotonic() - started:.0f} s")
    output = str(failure.value)
    assert FORWARD_STARTED in output, "the launch must reach the one-rank forward before its timeout"
    assert FORWARD_FINISHED not in output


def test_an_out_of_memory_error_in_one_ranks_generate_ends_the_launch_with_the_cap_to_set(tmp_path):
    """Under FSDP on several processes one process cannot halve its generate call alone (the others' forwards
    would wait on it): rank 0 stops with the message naming `max_rows_per_generate_call`, and the launch ends on
    every rank within its timeout, rank 1 stopped by the launcher or by rank 0's closed connection."""
    started = time.monotonic()
    returncode, output = launch_fsdp(2, SCRIPT, tmp_path, OUT_OF_MEMORY_TIMEOUT_S, "--runs", "out_of_memory")
    print(f"FSDP2 out-of-memory launch: {time.monotonic() - started:.0f} s")
    assert returncode != 0
    # The public message only (docs/troubleshooting.md), its first words and the cap it names.
    assert "Generation ran out of memory in a generate call of 8 rows on process 0 of 2" in output, output[-4000:]
    assert f"Set max_rows_per_generate_call to at most {PER_DEVICE_BATCH // 2}" in output
    for rank in (0, 1):
        exit_code = re.search(rf"rank\s*:\s*{rank} \(local_rank: {rank}\)\s*exitcode\s*:\s*(-?\d+)", output)
        assert exit_code and int(exit_code.group(1)) != 0, output[-4000:]
