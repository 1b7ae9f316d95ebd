"""The package's trainers under DeepSpeed ZeRO-2 and ZeRO-3 on two CPU processes, launched as a user launches them:
`accelerate launch` with TRL's zero2/zero3 accelerate config (launch.py). One launch per stage runs every
configuration of tests/dynamic_sampling/scripts/sharded_runs.py asked of it in turn; each rank records its engine,
weights, logs and dynamic-sampling steps.

Every run must really train under DeepSpeed (a `DeepSpeedEngine` of the stage on both ranks, weights changed and
equal on both), train exactly the groups the single-process decision picks from every row's scores
(tests/dynamic_sampling/sharded_checks.py), and, resumed mid-run from a checkpoint that holds the dynamic-sampling
state and the carried groups, log exactly what the uninterrupted run logged. The uneven ZeRO-3 run must finish
within the launch's timeout: any forward, generation step or reward-model call made on one process and not the
other would hang it.
"""


import pytest

from ..dynamic_sampling.scripts.sharded_runs import SAVE_STEPS
from ..dynamic_sampling.sharded_checks import (
    check_both_ranks_trained_one_model,
    check_the_groups_of_the_single_process_decision,
    check_the_drop_run,
    check_the_resume_logs_the_uninterrupted_run,
    check_the_uneven_run,
    launches_on_first_use,
)
from .launch import SCRIPTS, deepspeed_test, run_zero

pytestmark = deepspeed_test

SCRIPT = SCRIPTS / "zero_runs.py"
RUNS = {
    2: ("defaults", "resumed"),
    3: ("defaults", "resumed", "published", "dr_grpo", "reward_model", "lora", "uneven", "drop"),
}
# Generous for a loaded 2-core machine (about 80 s unloaded for ZeRO-3's seven runs, plus DeepSpeed's one-time
# build of its communication op, about 80 s, when no earlier run built it); a hang is killed here.
LAUNCH_TIMEOUT_S = 480
STAGE_RUNS = [(stage, run) for stage, runs in RUNS.items() for run in runs]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """`launched(stage)`: every run's per-rank records of the stage's one launch, made on first use."""

    def launch(stage, out_dir, *args):
        run_zero(stage, SCRIPT, out_dir, LAUNCH_TIMEOUT_S, *args)

    return launches_on_first_use(tmp_path_factory, "zero", RUNS, launch)


@pytest.mark.parametrize("stage, run", STAGE_RUNS, ids=[f"zero{stage}-{run}" for stage, run in STAGE_RUNS])
def test_both_ranks_train_under_a_deepspeed_engine(launched, stage, run):
    ranks = launched(stage)[run]
    for record in ranks:
        assert record["distributed_type"] == "DistributedType.DEEPSPEED"
        assert record["engine"] == "DeepSpeedEngine" and record["zero_stage"] == stage
        # ZeRO-3 partitions every parameter (launch script: `Zero.configure`), so that every forward is a
        # collective; ZeRO-2 leaves parameters whole.
        assert record["persistent"] == []
        assert record["partitioned"] == (list(record["weights_before"]) if stage == 3 else [])
    check_both_ranks_trained_one_model(ranks, run)


@pytest.mark.parametrize(
    "stage, run",
    [(stage, run) for stage, run in STAGE_RUNS if run not in ("resumed", "dr_grpo", "drop")],
    ids=[f"zero{stage}-{run}" for stage, run in STAGE_RUNS if run not in ("resumed", "dr_grpo", "drop")],
)
def test_ranks_train_the_groups_of_the_single_process_decision(launched, stage, run):
    check_the_groups_of_the_single_process_decision(launched(stage)[run], run)


@pytest.mark.parametrize("stage", RUNS)
def test_a_resume_from_a_mid_run_checkpoint_logs_what_the_uninterrupted_run_did(launched, stage):
    # DeepSpeed's own checkpoint (engine, ZeRO partitions of the optimizer) beside the package's state.
    check_the_resume_logs_the_uninterrupted_run(launched(stage), {f"global_step{SAVE_STEPS}"})


def test_zero3_prepares_the_reward_model_with_deepspeed(launched):
    for record in launched(3)["reward_model"]:
        assert record["reward_engines"] == ["HalfDegenerateReward", "DeepSpeedEngine"]
        assert all("rewards/reward_model/mean" in entry for entry in record["logs"])


def test_zero3_with_uneven_work_finishes_and_trains_the_decision(launched):
    """The decision is checked above; with `ds3_gather_for_generation=False`, each of rank 1's decoding steps is a
    collective rank 0 must join."""
    check_the_uneven_run(*launched(3)["uneven"])


def test_zero3_drop_trains_with_a_rank_whose_rows_are_all_flat(launched):
    check_the_drop_run(*launched(3)["drop"])
