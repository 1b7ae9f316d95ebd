"""The process pool of the resumable real-model grids, driving a real child process per run."""

import json
import time

import pytest

from benchmarks.shared.process_grid import run_grid

RUNNER = "tests.grid_runner_for_tests"


def journal_entries(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_every_run_once_seed_major_at_most_workers_at_a_time(tmp_path):
    journal = tmp_path / "journal.jsonl"
    exit_codes = run_grid(RUNNER, ["a", "fail"], [0, 1], workers=2, log_dir=str(tmp_path / "logs"),
                          extra_arguments=["--journal", str(journal), "--seconds", "0.5"], poll_s=0.05)

    assert exit_codes == {"a-seed0": 0, "fail-seed0": 3, "a-seed1": 0, "fail-seed1": 3}
    entries = journal_entries(journal)
    assert sorted(entry["name"] for entry in entries) == sorted(exit_codes)
    started = {entry["name"]: entry["started"] for entry in entries}
    ended = {entry["name"]: entry["ended"] for entry in entries}
    assert max(started["a-seed0"], started["fail-seed0"]) < min(started["a-seed1"], started["fail-seed1"])
    for entry in entries:  # no third run overlaps two others
        overlapping = [other for other in entries if other["started"] < entry["ended"] and entry["started"] < other["ended"]]
        assert len(overlapping) <= 2
    assert all(entry["deadline_unix"] is None for entry in entries)
    assert min(started["a-seed1"], started["fail-seed1"]) >= min(ended["a-seed0"], ended["fail-seed0"])
    assert (tmp_path / "logs" / "fail-seed1.log").read_text() == "fail seed 1 running\n"


def test_a_run_past_its_deadline_and_grace_is_killed_and_the_others_are_told_the_deadline(tmp_path):
    journal = tmp_path / "journal.jsonl"
    before = time.time()
    exit_codes = run_grid(RUNNER, ["hang", "a"], [0], workers=2, log_dir=str(tmp_path),
                          extra_arguments=["--journal", str(journal)], deadline_seconds=1.0, grace_s=1.0,
                          poll_s=0.05)

    assert time.time() - before < 30
    assert exit_codes["a-seed0"] == 0 and exit_codes["hang-seed0"] < 0
    (entry,) = journal_entries(journal)
    assert entry["name"] == "a-seed0" and entry["deadline_unix"] == pytest.approx(before + 1.0, abs=1.0)
    assert (tmp_path / "hang-seed0.log").read_text() == "hang seed 0 running\n"


def test_a_log_is_appended_to_so_a_resumed_run_keeps_its_earlier_output(tmp_path):
    (tmp_path / "a-seed0.log").write_text("earlier attempt\n")
    run_grid(RUNNER, ["a"], [0], workers=1, log_dir=str(tmp_path),
             extra_arguments=["--journal", str(tmp_path / "journal.jsonl"), "--seconds", "0"], poll_s=0.05)
    assert (tmp_path / "a-seed0.log").read_text() == "earlier attempt\na seed 0 running\n"


def test_workers_below_one_is_refused_by_name():
    with pytest.raises(ValueError, match="run_grid: workers must be at least 1, got 0"):
        run_grid(RUNNER, ["a"], [0], workers=0, log_dir="unused", extra_arguments=[])


def test_runs_reported_complete_start_no_process(tmp_path):
    journal = tmp_path / "journal.jsonl"
    exit_codes = run_grid(RUNNER, ["a", "b"], [0, 1], workers=2, log_dir=str(tmp_path),
                          extra_arguments=["--journal", str(journal), "--seconds", "0"], poll_s=0.05,
                          is_complete=lambda arm, seed: (arm, seed) != ("b", 1))
    assert exit_codes == {"b-seed1": 0}
    assert [entry["name"] for entry in journal_entries(journal)] == ["b-seed1"]


def test_a_result_file_is_complete_only_when_it_says_so(tmp_path):
    from benchmarks.study_harness.recorder import is_complete, write_result

    path = str(tmp_path / "a-seed0.json")
    assert not is_complete(path)
    write_result(path, {"complete": False})
    assert not is_complete(path)
    write_result(path, {"complete": True})
    assert is_complete(path)


def test_no_run_starts_too_close_to_the_deadline_and_the_grid_says_which(tmp_path, capsys):
    journal = tmp_path / "journal.jsonl"
    exit_codes = run_grid(RUNNER, ["a"], [0, 1], workers=1, log_dir=str(tmp_path),
                          extra_arguments=["--journal", str(journal), "--seconds", "1.5"], poll_s=0.05,
                          deadline_seconds=3.0, no_start_within_s=2.0)
    # a-seed0 starts at once; by the time it ends (1.5 s) the deadline is under 2 s away, so a-seed1 never starts.
    assert exit_codes == {"a-seed0": 0}
    assert [entry["name"] for entry in journal_entries(journal)] == ["a-seed0"]
    assert "not started, the deadline is under 2 s away: a-seed1" in capsys.readouterr().out
