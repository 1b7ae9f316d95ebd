"""The row exchange on two processes (CPU, gloo), launched with torchrun: tests/dynamic_sampling/scripts/
two_process_exchange.py trains with carrying three times from the same policy and seed: with the planned exchange,
with the batch laid out in order as before the exchange existed, and resumed from the planned run's checkpoint.

Each rank scores only its own rows and the ranks exchange counts; the trained groups must be exactly those the
selection picks from every row's scores (put together here from each rank's record), the same in both layouts,
with the same global loss; the planned layout must move fewer rows; carried rows must live on the rank that trains
them, and a resume on the same number of processes must train exactly what the uninterrupted run trained.
"""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from trl_variants.dynamic_sampling.checkpoint import CARRIED_RANK_FILE, load_carried_groups
from trl_variants.reliability.checkpoints import checkpoint_problems

from ..helpers import run_two_processes
from .scripts.step_records import ids
from .trained_groups import expected_trained as expected_trained_groups
from .trained_groups import generated, trained

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).resolve().parent / "scripts" / "two_process_exchange.py"
G = 4
PER_DEVICE_BATCH = 8
BATCH_GROUPS = 2 * PER_DEVICE_BATCH // G


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("two_process_exchange")
    run_two_processes(SCRIPT, out_dir, timeout_s=180)
    records = {
        name: [json.loads((out_dir / f"{name}_rank{rank}.json").read_text()) for rank in range(2)]
        for name in ("planned", "in_order", "resumed")
    }
    return {**records, "dir": str(out_dir)}


def expected_trained(ranks, step):
    return expected_trained_groups(ranks, step, G, BATCH_GROUPS)


def test_both_layouts_train_exactly_the_selected_groups(runs):
    for name in ("planned", "in_order"):
        ranks = runs[name]
        assert len(ranks[0]["steps"]) == 4
        for step in range(4):
            assert trained(ranks, step) == expected_trained(ranks, step)
            for rank in ranks:
                rows = rank["steps"][step]["trained"]
                assert len(rows) == PER_DEVICE_BATCH
                # Groups whole and contiguous on each rank.
                for start in range(0, PER_DEVICE_BATCH, G):
                    assert len({tuple(prompt) for prompt, _ in rows[start : start + G]}) == 1
    carried = [rank["logs"][step]["dynamic_sampling/carried_groups"] for rank in runs["planned"] for step in range(4)]
    assert sum(carried) > 0


def test_the_planned_layout_gives_todays_global_loss_and_moves_fewer_rows(runs):
    planned, in_order = runs["planned"], runs["in_order"]
    compared, moved_planned, moved_in_order = 0, 0, 0
    for step in range(4):
        # Until both runs generate the same rows (always at step 1; later steps may part ways by float rounding of
        # the differently ordered gradient sum), the loss is the same up to summation order.
        if [generated(planned, step), trained(planned, step)] != [generated(in_order, step), trained(in_order, step)]:
            break
        assert planned[0]["logs"][step]["loss"] == pytest.approx(in_order[0]["logs"][step]["loss"], rel=1e-5, abs=1e-6)
        moved_planned += sum(rank["steps"][step]["sent_rows"] for rank in planned)
        moved_in_order += sum(rank["steps"][step]["sent_rows"] for rank in in_order)
        compared += 1
    assert compared >= 1
    assert moved_planned <= moved_in_order
    if compared == 4:
        assert moved_planned < moved_in_order


def test_carried_rows_live_on_the_rank_that_trains_them(runs):
    for rank in runs["planned"]:
        for step in range(3):
            carried = rank["steps"][step]["carried_out"]
            assert all(row in rank["steps"][step + 1]["trained"] for row in carried)


def test_a_resume_on_the_same_processes_trains_what_the_uninterrupted_run_did(runs):
    for planned, resumed in zip(runs["planned"], runs["resumed"], strict=True):
        assert [step["global_step"] for step in resumed["steps"]] == [2, 3]
        assert resumed["steps"][0]["carried_groups"] > 0, "the checkpoint must be taken while groups are carried"
        for uninterrupted, after_resume in zip(planned["steps"][2:], resumed["steps"], strict=True):
            assert after_resume["trained"] == uninterrupted["trained"]
        assert resumed["logs"][2:] == planned["logs"][2:]


def stub_trainer(rank, num_processes, per_device_batch):
    return SimpleNamespace(
        accelerator=SimpleNamespace(process_index=rank, num_processes=num_processes),
        args=SimpleNamespace(per_device_train_batch_size=per_device_batch, steps_per_generation=1),
        num_generations=G,
    )


@pytest.mark.parametrize("num_processes, per_device_batch", [(2, PER_DEVICE_BATCH), (1, 16), (4, 4)])
def test_carried_groups_of_a_checkpoint_are_restored_on_any_number_of_processes(runs, num_processes, per_device_batch):
    checkpoint = Path(runs["dir"]) / "planned" / "checkpoint-2"
    assert checkpoint_problems(str(checkpoint)) == []
    saved = sorted(row for rank in runs["planned"] for row in rank["steps"][1]["carried_out"])
    assert saved, "the checkpoint must hold carried groups"
    restored = [
        load_carried_groups(stub_trainer(r, num_processes, per_device_batch), str(checkpoint))
        for r in range(num_processes)
    ]
    rows = sorted(ids(row) for carried in restored for row in carried.rows.values())
    assert rows == saved
    for rank, carried in enumerate(restored):
        assert carried.holders == restored[0].holders
        assert len(carried.rows) <= per_device_batch
        assert all(carried.holders[group][row] == rank for group, row in carried.rows)
        assert all(row.rewards is not None and len(row.rewards) == 1 for row in carried.rows.values())
    if num_processes == 2:
        # Same number of processes: every rank gets back exactly the rows it held.
        for rank, carried in zip(runs["planned"], restored, strict=True):
            assert [ids(row) for row in carried.rows.values()] == rank["steps"][1]["carried_out"]
            assert [row.rewards for row in carried.rows.values()] == rank["steps"][1]["carried_out_rewards"]


def test_a_checkpoint_missing_a_ranks_carried_rows_is_incomplete(runs, tmp_path):
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(Path(runs["dir"]) / "planned" / "checkpoint-2", checkpoint)
    (checkpoint / CARRIED_RANK_FILE.format(rank=1)).unlink()
    assert checkpoint_problems(str(checkpoint)) == [
        f"{CARRIED_RANK_FILE.format(rank=1)} is missing although the run carried surplus groups"
    ]
