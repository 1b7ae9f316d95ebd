"""The memory plan of transformers `generate` calls (trl_variants/dynamic_sampling/generation_memory.py and its use
in generate_calls.py).

The formula is checked without a model; the trainer-level tests replace the device's memory reading (which a CPU
does not have) by a function, wrap the real tiny model's `generate` to record each call's rows, and compare with
`GRPOTrainer`'s calls. The two-process test launches tests/dynamic_sampling/scripts/two_process_memory.py.
"""

import copy
import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, Qwen2VLConfig
from trl import GRPOConfig, GRPOTrainer

from trl_variants.dynamic_sampling import generation_memory
from trl_variants.dynamic_sampling.generate_calls import plan_calls
from trl_variants.dynamic_sampling.generation_memory import (
    MEMORY_MARGIN,
    DecoderShape,
    decoder_shape,
    free_bytes_for,
    free_device_memory,
    kv_cache_bytes,
    logits_bytes,
    planned_rows,
    row_bytes,
)

from ..helpers import run_two_processes
from .test_generate_calls import GENERATION_ROWS, G, run

# The formula, without a model.


def test_a_rows_memory_is_its_kv_cache_and_its_logits():
    config = LlamaConfig(num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, hidden_size=128,
                         vocab_size=1000)  # fmt: skip
    shape = decoder_shape(config, dtype_bytes=2)
    assert shape == DecoderShape(num_layers=3, num_kv_heads=2, head_dim=16, vocab_size=1000, dtype_bytes=2)
    # layers x KV heads x head dim x 2 (key, value) x dtype bytes x tokens.
    assert kv_cache_bytes(shape, 100) == 3 * 2 * 16 * 2 * 2 * 100
    assert logits_bytes(shape) == 1000 * 4 * 3
    assert row_bytes(shape, 60, 40) == 3 * 2 * 16 * 2 * 2 * 100 + 1000 * 4 * 3
    # A vision-language model's decoder is its text config's; an explicit head_dim wins over hidden / heads.
    vlm = Qwen2VLConfig(text_config=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                         hidden_size=64, vocab_size=500))  # fmt: skip
    assert decoder_shape(vlm, 4) == DecoderShape(2, 4, 16, 500, 4)


def test_the_plan_fits_whole_groups_in_free_memory_less_the_margin_never_below_a_generation_batch():
    per_row = 1000
    # 80 % of 100 000 bytes: 80 rows, 20 groups of four.
    assert MEMORY_MARGIN == 0.2
    assert planned_rows(100_000, per_row, 4, 16) == 80
    assert planned_rows(100_000 - 1, per_row, 4, 16) == 76  # 79 rows fit: rounded down to whole groups
    assert planned_rows(10_000, per_row, 4, 16) == 16  # 8 rows fit: one generation batch all the same
    assert planned_rows(-5, per_row, 4, 16) == 16
    for rows in (16, 20, 64):
        assert planned_rows(free_bytes_for(rows, per_row), per_row, 4, 16) == rows
    with pytest.raises(ValueError, match=r"floor_rows \(6\) a positive multiple of unit"):
        planned_rows(100_000, per_row, 4, 6)


def test_a_cpu_has_no_memory_reading():
    assert free_device_memory(torch.device("cpu")) is None


# Real trainer runs on the toy task, the memory reading replaced.


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


def reading_allowing(monkeypatch, rows: int) -> list[int]:
    """Makes the device report the free memory that plans `rows` rows per call for the round at hand; returns the
    per-row estimates the trainer made, one per planned round."""
    estimates = []
    estimate = generation_memory.row_bytes

    def recording_row_bytes(*args):
        estimates.append(estimate(*args))
        return estimates[-1]

    monkeypatch.setattr(generation_memory, "row_bytes", recording_row_bytes)
    monkeypatch.setattr(generation_memory, "free_device_memory", lambda device: free_bytes_for(rows, estimates[-1]))
    return estimates


def test_the_plan_cuts_each_round_into_calls_of_the_rows_that_fit_and_is_logged_once(task, tmp_path, monkeypatch,
                                                                                     caplog):  # fmt: skip
    estimates = reading_allowing(monkeypatch, 2 * GENERATION_ROWS - G)
    with caplog.at_level(logging.INFO, logger="trl_variants.dynamic_sampling.generate_calls"):
        trainer, log, _ = run(task, tmp_path)
    assert len(estimates) == len(log.turns)  # one plan per round
    for rows, calls in zip(log.turn_rows, log.turns, strict=True):
        assert calls == [stop - start for start, stop in plan_calls(rows, G, 2 * GENERATION_ROWS - G)]
    assert any(len(calls) > 1 for calls in log.turns)
    plans = [r.getMessage() for r in caplog.records if "memory plan" in r.getMessage()]
    assert len(plans) == 1 and plans[0].startswith(f"Generation memory plan: calls of at most {2 * GENERATION_ROWS - G}")


def test_a_reading_that_allows_one_generation_batch_gives_grpo_trainers_calls(task, tmp_path, monkeypatch):
    reading_allowing(monkeypatch, GENERATION_ROWS)
    _, dapo, _ = run(copy.deepcopy(task), tmp_path / "dapo")
    _, grpo, _ = run(task, tmp_path / "grpo", trainer_class=GRPOTrainer, config_class=GRPOConfig)
    assert grpo.turns == [[GENERATION_ROWS]] * 2
    # Every round went to generate in GRPOTrainer's calls: one generation batch each, a refill round's last call
    # the rest of it.
    assert max(dapo.turn_rows) > GENERATION_ROWS
    for rows, calls in zip(dapo.turn_rows, dapo.turns, strict=True):
        assert calls == [GENERATION_ROWS] * (rows // GENERATION_ROWS) + ([rows % GENERATION_ROWS] if rows % GENERATION_ROWS else [])
    first_round_calls = [calls[0] for calls in dapo.turns]
    assert first_round_calls[0] == grpo.turns[0][0]


@pytest.mark.multiprocess
def test_two_processes_with_different_free_memory_make_the_same_calls(tmp_path):
    script = Path(__file__).resolve().parent / "scripts" / "two_process_memory.py"
    run_two_processes(script, tmp_path, timeout_s=120)
    first, second = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2))
    # Alone, rank 1's reading would plan three generation batches a call, rank 0's one.
    assert (first["allowed_rows"], second["allowed_rows"]) == (first["batch_rows"], 3 * first["batch_rows"])
    assert first["turns"] == second["turns"] and first["turn_rows"] == second["turn_rows"]
    assert max(first["turn_rows"]) > first["batch_rows"]
    assert all(max(calls) <= first["batch_rows"] for calls in first["turns"])
