"""Dynamic sampling across two processes (CPU, gloo), launched with torchrun.

tests/dynamic_sampling/scripts/two_process.py trains with a half-degenerate reward, then with an
always-degenerate one, then with the half-degenerate one and prompt skipping (streak rule, then posterior rule);
each rank records its keep/drop decisions, the rows it trained on and, when skipping, its prompt history and skip
decisions. The ranks must agree on every decision and on the history, train on equal shares of the batch with
groups whole, and finish without hanging.
"""

import json
from pathlib import Path

import pytest

from ..helpers import run_two_processes
from .scripts.rewards import is_live_prompt

pytestmark = pytest.mark.multiprocess

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tests" / "dynamic_sampling" / "scripts" / "two_process.py"
LAUNCH_TIMEOUT_S = 120
NUM_PROCESSES = 2
NUM_GENERATIONS = 4
PER_DEVICE_BATCH = 8
SPLIT_PER_DEVICE_BATCH = 6
STEPS = 3
MAX_ROUNDS = 3
BATCH_GROUPS = NUM_PROCESSES * PER_DEVICE_BATCH // NUM_GENERATIONS
RUNS = ("half", "exhausted", "skipping", "posterior", "stream", "stream_dry")


@pytest.fixture(scope="module")
def two_process_records(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("two_process")
    run_two_processes(SCRIPT, out_dir, LAUNCH_TIMEOUT_S)
    return {
        **{
            run: [json.loads((out_dir / f"{run}_rank{rank}.json").read_text()) for rank in range(NUM_PROCESSES)]
            for run in (*RUNS, "environment")
        },
        "dir": str(out_dir),
    }


@pytest.mark.parametrize("run", RUNS)
def test_ranks_take_identical_decisions_and_train_equal_shares(two_process_records, run):
    ranks = two_process_records[run]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["num_processes"] == NUM_PROCESSES for r in ranks)
    assert all(r["global_step"] == STEPS for r in ranks)
    first, second = ranks
    assert len(first["decisions"]) == STEPS
    assert first["decisions"] == second["decisions"]
    assert first["logs"] == second["logs"]
    for rank in ranks:
        assert [step["rows"] for step in rank["local_rows"]] == [PER_DEVICE_BATCH] * STEPS
        assert rank["loss_rows"] == [PER_DEVICE_BATCH] * STEPS
    for step in range(STEPS):
        # Every rank knows the rewards of the whole batch, in batch order: each rank's rows then the next's.
        assert first["batches"][step]["batch_rewards"] == second["batches"][step]["batch_rewards"]
        assert first["batches"][step]["batch_rewards"] == [
            reward for rank in ranks for reward in rank["batches"][step]["rewards"]
        ]
        for rank in ranks:
            prompts = rank["batches"][step]["prompts"]
            # Groups stay contiguous within each rank's share, and TRL's scoring pass sees exactly those rows.
            for start in range(0, len(prompts), NUM_GENERATIONS):
                assert len(set(prompts[start : start + NUM_GENERATIONS])) == 1
            assert rank["local_rows"][step]["prompts"] == prompts


def test_half_degenerate_run_keeps_only_informative_groups(two_process_records):
    first = two_process_records["half"][0]
    assert any(not all(d["informative"]) for d in first["decisions"]), "some groups must have been dropped"
    batches = [
        {
            key: [value for rank in two_process_records["half"] for value in rank["batches"][step][key]]
            for key in ("prompts", "rewards")
        }
        for step in range(STEPS)
    ]
    for decision, batch, entry in zip(first["decisions"], batches, first["logs"], strict=True):
        informative = decision["informative"]
        assert decision["kept"] == [i for i, flag in enumerate(informative) if flag][:BATCH_GROUPS]
        assert decision["filled"] == []
        assert entry["dynamic_sampling/pass_rate"] == pytest.approx(sum(informative) / len(informative))
        assert all(is_live_prompt(p) for p in batch["prompts"])
        for start in range(0, len(batch["rewards"]), NUM_GENERATIONS):
            scores = [row[0] for row in batch["rewards"][start : start + NUM_GENERATIONS]]
            assert max(scores) > min(scores)
    for rank in two_process_records["half"]:
        assert all(abs(a) > 1e-3 for step in rank["local_rows"] for a in step["advantages"])


def test_exhausted_run_fills_with_degenerate_groups(two_process_records):
    first = two_process_records["exhausted"][0]
    for decision, entry in zip(first["decisions"], first["logs"], strict=True):
        assert not any(decision["informative"])
        assert decision["kept"] == [] and decision["filled"] == list(range(BATCH_GROUPS))
        assert entry["dynamic_sampling/filled"] == 1.0
        assert entry["dynamic_sampling/rounds"] == MAX_ROUNDS
    for rank in two_process_records["exhausted"]:
        assert all(a == 0 for step in rank["local_rows"] for a in step["advantages"])


def test_ranks_hold_identical_prompt_history_and_skip_decisions(two_process_records):
    first, second = two_process_records["skipping"]
    assert first["history"] is not None and first["history"] == second["history"]
    assert first["explore_p"] == second["explore_p"]
    assert first["picks"] == second["picks"]
    assert sum(len(pick["skipped"]) for pick in first["picks"]) > 0, "the run must have skipped prompts"
    assert max(first["history"]["streak"]) >= 1
    logged = sum(entry["dynamic_sampling/skipped_prompts"] for entry in first["logs"])
    assert logged == sum(len(pick["skipped"]) for pick in first["picks"])


def test_ranks_hold_identical_pass_rate_posterior_and_skip_decisions(two_process_records):
    first, second = two_process_records["posterior"]
    assert first["history"] is not None and first["history"] == second["history"]
    assert first["picks"] == second["picks"]
    assert max(first["history"]["wrong"]) > 0 and max(first["history"]["updated"]) >= 0
    logged = sum(entry["dynamic_sampling/skipped_prompts"] for entry in first["logs"])
    assert logged == sum(len(pick["skipped"]) for pick in first["picks"])


def test_ranks_read_the_same_stream_and_keep_informative_groups(two_process_records):
    first, second = two_process_records["stream"]
    assert first["refill_state"]["stream"]["position"] > 0
    # Rank 0 alone reads the stream; the other rank follows the position it broadcast.
    assert first["refill_state"] == second["refill_state"]
    assert first["history"] == second["history"] and first["picks"] == second["picks"]
    for batch in first["batches"]:
        assert all(is_live_prompt(p) for p in batch["prompts"])
        groups = batch["prompts"][::NUM_GENERATIONS]
        assert len(set(groups)) == len(groups), "a prompt was trained twice in one batch"


def test_a_stream_with_nothing_to_refill_fills_on_every_rank(two_process_records):
    first, second = two_process_records["stream_dry"]
    for entry in first["logs"]:
        # The batch's own four prompts, then no round: the stream had none unread.
        assert entry["dynamic_sampling/filled"] == 1.0 and entry["dynamic_sampling/generated_groups"] == BATCH_GROUPS
    assert first["logs"] == second["logs"]


def test_each_rank_resets_and_scores_its_own_rollouts_once(two_process_records):
    first, second = two_process_records["environment"]
    assert first["decisions"] == second["decisions"] and first["logs"] == second["logs"]
    generated_rows = sum(entry["dynamic_sampling/generated_groups"] for entry in first["logs"]) * NUM_GENERATIONS
    for rank in (first, second):
        # Each rank generates half of every round's rows and resets one episode per rollout it generates.
        assert rank["resets"] == generated_rows // NUM_PROCESSES
        assert sorted(rank["scored_episodes"]) == list(range(rank["resets"]))
        assert rank["sees_observation"]
    assert all("tools/call_frequency" in entry for entry in first["logs"])


def test_groups_straddling_processes_are_decided_whole_and_trained_split(two_process_records):
    """Six rows per process, groups of four: TRL's layout puts one group of each batch on both processes. Each
    process generates its own rows of it, as in `GRPOTrainer`; every process decides on the whole group, and phase 2
    trains TRL's layout."""
    ranks = [
        json.loads((Path(two_process_records["dir"]) / f"split_rank{rank}.json").read_text())
        for rank in range(NUM_PROCESSES)
    ]
    first, second = ranks
    batch_groups = NUM_PROCESSES * SPLIT_PER_DEVICE_BATCH // NUM_GENERATIONS
    assert all(rank["global_step"] == STEPS for rank in ranks)
    assert first["decisions"] == second["decisions"] and first["logs"] == second["logs"]
    assert any(not all(d["informative"]) for d in first["decisions"]), "some groups must have been dropped"
    for decision, entry in zip(first["decisions"], first["logs"], strict=True):
        informative = decision["informative"]
        assert entry["dynamic_sampling/generated_groups"] == len(informative)
        assert decision["kept"] == [i for i, flag in enumerate(informative) if flag][:batch_groups]
    for step in range(STEPS):
        for rank in ranks:
            assert rank["local_rows"][step]["rows"] == SPLIT_PER_DEVICE_BATCH
            assert rank["local_rows"][step]["prompts"] == rank["batches"][step]["prompts"]
        prompts = [p for rank in ranks for p in rank["batches"][step]["prompts"]]
        rewards = [r[0] for rank in ranks for r in rank["batches"][step]["rewards"]]
        assert first["batches"][step]["batch_rewards"] == [r for rank in ranks for r in rank["batches"][step]["rewards"]]
        for start in range(0, len(prompts), NUM_GENERATIONS):
            assert len(set(prompts[start : start + NUM_GENERATIONS])) == 1, "groups contiguous over the processes"
            assert max(rewards[start : start + NUM_GENERATIONS]) > min(rewards[start : start + NUM_GENERATIONS])
    assert ranks[0]["loss_rows"] == ranks[1]["loss_rows"] == [SPLIT_PER_DEVICE_BATCH] * STEPS

