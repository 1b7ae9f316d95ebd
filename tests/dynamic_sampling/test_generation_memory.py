"""Sizing transformers `generate` calls from measured memory (trl_variants/dynamic_sampling/generation_memory.py and
its use in generate_calls.py).

The prediction and the sizing are checked without a model, the bound against many synthetic memory laws. The
trainer-level tests run the real tiny model and replace only the device's memory readings, which a CPU does not have
(the boundary a GPU would provide), by `ScriptedDeviceMemory`: each call's "peak" is a fixed number of bytes per row
of the call the model's `generate` really received. benchmarks/generation_memory checks the sizing against real
peaks measured on CPU.
"""

import copy
import dataclasses
import json
import logging
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import GenerationMixin
from trl import GRPOConfig, GRPOTrainer

from trl_variants.dynamic_sampling import generate_calls
from trl_variants.dynamic_sampling.generate_calls import GenerateCalls, is_out_of_memory
from trl_variants.dynamic_sampling.generation_memory import (
    KEPT_MEASUREMENTS,
    MEMORY_MARGIN,
    CallPeak,
    DeviceMemory,
    call_rows,
    predicted_peak,
)

from ..helpers import launch_outcome, run_two_processes, two_process_command
from .test_generate_calls import GENERATION_ROWS, G, plan_rows, run

# The prediction and the sizing, without a model.


def test_a_call_like_the_measured_one_is_predicted_at_its_peak_and_larger_ones_above_it():
    measured = CallPeak(rows=16, prompt_tokens=100, completion_tokens=50, peak_bytes=1_000_000)
    assert predicted_peak(measured, 16, 100, 50) == 1_000_000
    assert predicted_peak(measured, 32, 100, 50) == 2_000_000  # rows scale the whole peak
    assert predicted_peak(measured, 8, 100, 50) == 1_000_000  # never predicted below a larger measured call
    assert predicted_peak(measured, 16, 100, 150) == 1_000_000 * 250 / 150  # completions: the tokens held
    assert predicted_peak(measured, 16, 200, 50) == 4_000_000  # a longer prompt: its square bounds the prefill
    assert predicted_peak(measured, 16, 50, 10) == 1_000_000  # shorter calls are not scaled down


def test_the_prediction_bounds_every_memory_law_of_fixed_linear_and_prompt_squared_parts():
    """Peaks made of a fixed part, parts per row linear in the prompt, in the tokens held and constant (logits), and
    a part per row quadratic in the prompt (eager attention's prefill): the prediction from any measured call is
    never below the law's own value, over many random laws and shapes."""
    rng = random.Random(0)
    for _ in range(5000):
        fixed, per_token, prefill, per_row, square = (rng.choice([0, rng.uniform(0, 1e6)]) for _ in range(5))

        def law(rows, prompt, completion):
            return fixed + rows * (per_token * (prompt + completion) + prefill * prompt + per_row + square * prompt**2)

        rows0, prompt0, new0 = rng.randint(1, 64), rng.randint(1, 2048), rng.randint(0, 2048)
        measured = CallPeak(rows0, prompt0, new0, law(rows0, prompt0, new0))
        rows, prompt, completion = rng.randint(1, 512), rng.randint(1, 4096), rng.randint(new0, 4096)
        assert predicted_peak(measured, rows, prompt, completion) >= law(rows, prompt, completion) * (1 - 1e-9)


def test_the_rows_are_the_most_whole_groups_within_the_free_memory_less_the_margin():
    measured = CallPeak(rows=16, prompt_tokens=100, completion_tokens=50, peak_bytes=16_000)  # 1,000 bytes a row
    free = 100_000  # 90,000 usable: 90 rows, 88 in groups of 8
    assert MEMORY_MARGIN == 0.1
    assert call_rows([measured], free, 100, 50, unit=8, floor_rows=16) == 88
    assert call_rows([measured], free, 100, 50, unit=1, floor_rows=16) == 90
    # A measurement that does not fit at all plans one generation batch; so does negative free memory.
    assert call_rows([measured], 10_000, 100, 50, unit=8, floor_rows=16) == 16
    assert call_rows([measured], -5, 100, 50, unit=8, floor_rows=16) == 16
    # The tightest bound wins: a larger measured call that needed less per row allows more.
    larger = CallPeak(rows=64, prompt_tokens=100, completion_tokens=50, peak_bytes=32_000)
    assert call_rows([measured, larger], free, 100, 50, unit=8, floor_rows=16) == 176
    with pytest.raises(ValueError, match=r"floor_rows \(6\) must be a positive multiple of unit \(4\)"):
        call_rows([measured], free, 100, 50, unit=4, floor_rows=6)


def test_there_is_no_plan_before_a_measurement_or_without_a_free_memory_reading():
    assert call_rows([], 10**9, 100, 50, 4, 16) is None
    measured = [CallPeak(16, 100, 50, 16_000)]
    assert call_rows(measured, None, 100, 50, 4, 16) is None
    assert call_rows(measured, 10**9, 100, 50, 4, 16) > 16


def test_every_training_call_is_measured_and_the_latest_measurements_are_kept(monkeypatch):
    peaks = iter(range(1, 100))
    readings = SimpleNamespace(start=lambda: 0, peak_since=lambda start: next(peaks), free=lambda: None)
    monkeypatch.setattr(generate_calls, "DeviceMemory", lambda device: readings)
    model = SimpleNamespace(training=True, is_gradient_checkpointing=False)
    accelerator = SimpleNamespace(device=torch.device("cpu"), num_processes=1, process_index=0,
                                  unwrap_model=lambda x: x)
    trainer = SimpleNamespace(
        accelerator=accelerator, use_vllm=False, use_transformers_continuous_batching=False, model=model,
        model_wrapped=model, pad_to_multiple_of=None, args=SimpleNamespace(max_rows_per_generate_call=None),
        _dist=SimpleNamespace(is_zero3=False),
    )  # fmt: skip
    calls = GenerateCalls(trainer)
    for length in range(1, 21):
        calls.generate_single_turn(lambda ids, *rest: ([[0, 0]] * len(ids), None), [[1] * length] * G, None, {}, G)
    assert KEPT_MEASUREMENTS == 16
    assert calls.measured == [CallPeak(G, length, 2, length) for length in range(5, 21)]


def test_a_device_without_the_readings_declines():
    for device in ("cpu", "meta"):
        memory = DeviceMemory(torch.device(device))
        assert (memory.free(), memory.start(), memory.peak_since(memory.start())) == (None, None, None)


def test_a_backend_missing_a_reading_or_failing_one_declines(monkeypatch):
    calls = {"mem_get_info": lambda device: (1000, 4000), "memory_reserved": lambda device: 300,
             "memory_allocated": lambda device: 100, "max_memory_allocated": lambda device: 700,
             "reset_peak_memory_stats": lambda device: None}  # fmt: skip
    memory = DeviceMemory(torch.device("meta"))
    memory.backend = SimpleNamespace(**calls)
    assert memory.free() == 1000 + 300 - 100
    assert memory.peak_since(memory.start()) == 600
    # A backend lacking one function (MPS has no max_memory_allocated) has no plan.
    mps_like = SimpleNamespace(**{**calls, "max_memory_allocated": None})
    monkeypatch.setattr(torch, "mps", mps_like)
    assert DeviceMemory(torch.device("mps")).backend is None
    monkeypatch.setattr(torch, "mps", SimpleNamespace(**calls))
    assert DeviceMemory(torch.device("mps")).backend is not None
    # A reading that raises turns the readings off for the rest of the run.

    def unsupported(device):
        raise RuntimeError("memory stats are not supported on this backend")

    memory.backend = SimpleNamespace(**{**calls, "mem_get_info": unsupported})
    assert memory.free() is None and memory.backend is None and memory.start() is None


def test_out_of_memory_errors_are_recognised_and_others_are_not():
    for message in ("CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA error: out of memory",
                    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                    "XPU out of memory.", "MPS backend out of memory (MPS allocated: 1 GB)",
                    "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory: you tried to allocate"):  # fmt: skip
        assert is_out_of_memory(RuntimeError(message)), message
    assert is_out_of_memory(torch.OutOfMemoryError("anything"))
    assert not is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if"))
    assert not is_out_of_memory(ValueError("out of memory"))


# Real trainer runs on the toy task, the device's readings scripted.


class ScriptedDeviceMemory:
    """Stands in for a GPU's memory readings: `free_bytes` free, and each measured call's peak `bytes_per_row` times
    the rows of the `generate` call the model last received (`last_call_rows`)."""

    def __init__(self, free_bytes: int, bytes_per_row: int, last_call_rows):
        self.free_bytes, self.bytes_per_row, self.last_call_rows = free_bytes, bytes_per_row, last_call_rows

    def free(self) -> int:
        return self.free_bytes

    def start(self) -> int:
        return 0

    def peak_since(self, start: int) -> int:
        return self.bytes_per_row * self.last_call_rows()


BYTES_PER_ROW = 1_000_000


def free_allowing(rows: int) -> int:
    """The free memory in which `call_rows` fits exactly `rows` rows of `BYTES_PER_ROW` (same lengths)."""
    return int(rows * BYTES_PER_ROW / (1 - MEMORY_MARGIN)) + 1


def scripted_memory(monkeypatch, free_bytes: int) -> None:
    """Makes every trainer's device readings `ScriptedDeviceMemory`, each call's peak read from the rows the model's
    `generate` (patched on the class, before any trainer wraps it) really received."""
    seen, generate = [], GenerationMixin.generate

    def recording(model, *args, **kwargs):
        seen.append(kwargs["input_ids"].shape[0])
        return generate(model, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "generate", recording)
    monkeypatch.setattr(
        generate_calls, "DeviceMemory", lambda device: ScriptedDeviceMemory(free_bytes, BYTES_PER_ROW, lambda: seen[-1])
    )


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


def test_the_first_round_is_grpo_trainers_call_and_later_rounds_follow_the_measured_plan(task, tmp_path, monkeypatch,
                                                                                        caplog):  # fmt: skip
    allowed = 2 * GENERATION_ROWS + G
    scripted_memory(monkeypatch, free_allowing(allowed))
    with caplog.at_level(logging.INFO, logger="trl_variants.dynamic_sampling.generate_calls"):
        trainer, log, _ = run(task, tmp_path)
    # Round 1: no call measured yet, so one generation batch per call. Every later round: calls of the plan the
    # measured calls allow, between one generation batch and `allowed` rows (the peak here is linear in the rows,
    # but the prediction also scales for prompts and completions longer than the measured call's).
    assert log.turns[0] == plan_rows(log.turn_rows[0], GENERATION_ROWS)
    for rows, calls in zip(log.turn_rows[1:], log.turns[1:], strict=True):
        assert GENERATION_ROWS <= calls[0] <= allowed and calls == plan_rows(rows, calls[0])
    assert any(max(calls) > GENERATION_ROWS for calls in log.turns[1:])
    assert GENERATION_ROWS < trainer.dynamic_sampler.calls.last_plan <= allowed
    assert [call.rows for call in trainer.dynamic_sampler.calls.measured] == [rows for calls in log.turns for rows in calls][-16:]
    messages = [r.getMessage() for r in caplog.records if r.name.endswith("generate_calls")]
    assert messages[0].startswith(f"Generation calls: one generation batch per process ({GENERATION_ROWS} rows")
    assert "no call measured yet" in messages[0]
    plans = [m for m in messages if m.startswith("Generation memory plan")]
    assert len(plans) == 1 and plans[0].startswith(f"Generation memory plan: calls of at most {log.turns[1][0]} rows")
    assert "from 1 measured call(s)" in plans[0]


def test_a_reading_that_allows_one_generation_batch_gives_grpo_trainers_calls(task, tmp_path, monkeypatch):
    scripted_memory(monkeypatch, free_allowing(GENERATION_ROWS))
    _, dapo, _ = run(copy.deepcopy(task), tmp_path / "dapo")
    _, grpo, _ = run(task, tmp_path / "grpo", trainer_class=GRPOTrainer, config_class=GRPOConfig)
    assert grpo.turns == [[GENERATION_ROWS]] * 2
    assert max(dapo.turn_rows) > GENERATION_ROWS
    for rows, calls in zip(dapo.turn_rows, dapo.turns, strict=True):
        assert calls == plan_rows(rows, GENERATION_ROWS)
    assert dapo.turns[0][0] == grpo.turns[0][0]


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
    assert first["planned"] == second["planned"] == first["batch_rows"]


@pytest.mark.multiprocess
def test_an_error_in_one_processs_generate_stops_every_process_with_its_message(tmp_path):
    script = Path(__file__).resolve().parent / "scripts" / "two_process_memory.py"
    command = two_process_command(script, "--out", tmp_path, "--fail_on_rank", "1")
    returncode, output = launch_outcome(command, {**os.environ, "ACCELERATE_USE_CPU": "1"}, timeout_s=120)
    assert returncode != 0
    assert "ValueError: boom" in output
    assert "Generation failed on process 1 (stopping process 0 too): ValueError: boom" in output
