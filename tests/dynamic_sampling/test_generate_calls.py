"""Transformers `generate` calls of dynamic sampling: one per round by default, cut by `max_rows_per_generate_call`,
halved on an out-of-memory error (trl_variants/dynamic_sampling/generate_calls.py).

The call plans are checked without a model; the trainer-level tests wrap the real tiny model's `generate` on the
instance to count its calls and their rows, and to raise the CUDA out-of-memory error no CPU run can meet. The
error is raised before the call draws any random number, so the run that meets it and the run with the halved size
set from the start draw the same random stream and are compared exactly.
"""

import copy
import dataclasses
import json
import logging
import re
from types import SimpleNamespace

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling import generate_calls
from trl_variants.dynamic_sampling.generate_calls import (
    GenerateCalls,
    call_unit,
    halve_call,
    plan_calls,
    retry_problem,
    rows_of_fields,
)
from trl_variants.dynamic_sampling.checkpoint import STATE_FILE

from ..helpers import toy_config, toy_trainer
from .scripts.chat_models import llava_task
from .scripts.rewards import HalfDegenerateReward
from .test_replay import assert_rows_carry_their_own_images, even_operand_reward

G = 4
PER_DEVICE_BATCH = 4
STEPS_PER_GENERATION = 4
GENERATION_ROWS = PER_DEVICE_BATCH * STEPS_PER_GENERATION  # 16 rows, 4 groups per generation batch
CUDA_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB"


# The plans, without a model.


def test_without_a_cap_the_rows_go_in_one_call():
    assert plan_calls(40, 4, None) == [(0, 40)]
    assert plan_calls(0, 4, None) == []


def test_a_cap_cuts_calls_of_whole_groups_the_last_one_shorter():
    assert plan_calls(40, 4, 16) == [(0, 16), (16, 32), (32, 40)]
    # A cap that is no multiple of the unit is rounded down to whole groups, never below one group.
    assert plan_calls(40, 4, 18) == [(0, 16), (16, 32), (32, 40)]
    assert plan_calls(8, 4, 2) == [(0, 4), (4, 8)]
    assert plan_calls(5, 1, 2) == [(0, 2), (2, 4), (4, 5)]


def test_plans_refuse_rows_that_are_not_whole_units():
    with pytest.raises(ValueError, match=r"num_rows \(10\) must be a non-negative multiple of unit \(4\)"):
        plan_calls(10, 4, None)
    with pytest.raises(ValueError, match="max_rows must be >= 1 or None, got 0"):
        plan_calls(8, 4, 0)


def test_a_call_is_cut_in_groups_when_its_rows_are_groups_else_in_rows():
    assert call_unit(24, 8) == 8
    # TRL's tool loop generates the follow-up turns of single rows (num_generations=1), any number of them.
    assert call_unit(5, 1) == 1
    assert call_unit(12, 8) == 1


def test_halving_keeps_whole_groups_and_stops_at_one_group():
    assert halve_call((0, 40), 4) == [(0, 20), (20, 40)]
    assert halve_call((16, 36), 4) == [(16, 28), (28, 36)]  # five groups: three, then two
    assert halve_call((0, 8), 4) == [(0, 4), (4, 8)]
    assert halve_call((4, 8), 4) is None


def test_a_call_is_retried_only_where_every_process_can_go_on_alone():
    assert retry_problem(32, 4, 4, collectives=False, splittable=True, process=0, num_processes=2) is None
    sharded = retry_problem(40, 4, 4, collectives=True, splittable=True, process=1, num_processes=2)
    assert "generate call of 40 rows on process 1 of 2" in sharded
    assert "DeepSpeed ZeRO-3 or FSDP" in sharded and "max_rows_per_generate_call to at most 20" in sharded
    images = retry_problem(32, 4, 4, False, False, 0, 1, fields=["image_grid_thw", "pixel_values"])
    assert "image inputs (['image_grid_thw', 'pixel_values']) cannot be cut by row" in images
    # The advice names what the user can change; not the cap, which such inputs refuse.
    assert "per_device_train_batch_size * steps_per_generation" in images and "use_vllm=True" in images
    assert "max_rows_per_generate_call" not in images
    one_group = retry_problem(4, 4, 4, collectives=False, splittable=True, process=0, num_processes=1)
    assert "one group of num_generations=4 completions" in one_group and "max_completion_length" in one_group
    # A call of one group has nothing to halve, whatever else holds.
    assert retry_problem(4, 4, 4, True, False, 0, 2) == one_group
    assert "one row" in retry_problem(1, 1, 4, collectives=False, splittable=True, process=0, num_processes=1)


def test_the_trainer_sees_collectives_under_fsdp_or_zero3_on_several_processes_only():
    def calls(num_processes, fsdp, zero3=False):
        device = torch.device("cpu")
        stub = SimpleNamespace(
            accelerator=SimpleNamespace(num_processes=num_processes, process_index=0, device=device),
            is_fsdp_enabled=fsdp, _dist=SimpleNamespace(is_zero3=zero3),
        )  # fmt: skip
        return GenerateCalls(stub)

    assert calls(2, True).has_collectives() and calls(2, False, zero3=True).has_collectives()
    assert not any(c.has_collectives() for c in (calls(1, True), calls(1, False, zero3=True), calls(2, False)))


def test_image_inputs_are_cut_by_row_as_trl_splits_them():
    # LLaVA's layout as one tensor: one pixel_values entry per image, rows with one image or none.
    images = [["a"], None, ["c"], ["d"]]
    pixel_values = torch.arange(3 * 2).float().view(3, 2)
    sizes = torch.tensor([[1, 1], [2, 2], [3, 3]])
    per_row = rows_of_fields({"pixel_values": pixel_values, "image_sizes": sizes}, images, 4)
    middle = per_row(1, 3)
    torch.testing.assert_close(middle["pixel_values"], pixel_values[1:2])
    torch.testing.assert_close(middle["image_sizes"], torch.tensor([[2, 2]]))
    torch.testing.assert_close(per_row(2, 4)["pixel_values"], pixel_values[1:])
    # Lists, one entry per row (as TRL's generation path receives a processor's pixel values), are sliced as lists.
    arrays = {"pixel_values": ["p0", "p1", "p2", "p3"], "token_type_ids": [[0, 1], [0], [1], [0, 0]]}
    assert rows_of_fields(arrays, images, 4)(1, 3) == {"pixel_values": ["p1", "p2"], "token_type_ids": [[0], [1]]}
    assert rows_of_fields({}, None, 4)(0, 2) == {}
    # A value neither per row nor per image cannot be cut.
    assert rows_of_fields({"pixel_values": torch.zeros(7, 2)}, images, 4) is None
    assert rows_of_fields({"pixel_values": ["p0", "p2", "p3"]}, images, 4) is None


# Real trainer runs on the toy task.


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


@dataclasses.dataclass
class GenerateLog:
    """Per call of TRL's `_generate_single_turn` (one per round), the rows of each model `generate` call it made."""

    turns: list[list[int]] = dataclasses.field(default_factory=list)
    turn_rows: list[int] = dataclasses.field(default_factory=list)
    failed: list[int] = dataclasses.field(default_factory=list)


def watch_generate(trainer, fail=lambda rows, log: False, error: Exception | None = None) -> GenerateLog:
    """Wraps the model's `generate` to record each call's rows, raising `error` (by default CUDA's out-of-memory
    error) where `fail(rows, log)` says, before the call draws anything."""
    log = GenerateLog()
    model_generate = trainer.model.generate
    single_turn = trainer._generate_single_turn

    def generate(*args, **kwargs):
        rows = kwargs["input_ids"].shape[0]
        if fail(rows, log):
            log.failed.append(rows)
            raise error if error is not None else torch.OutOfMemoryError(CUDA_OOM)
        log.turns[-1].append(rows)
        return model_generate(*args, **kwargs)

    def generate_single_turn(prompt_ids, *args, **kwargs):
        log.turns.append([])
        log.turn_rows.append(len(prompt_ids))
        return single_turn(prompt_ids, *args, **kwargs)

    trainer.model.generate = generate
    trainer._generate_single_turn = generate_single_turn
    return log


def loss_recorder(trainer) -> list[dict]:
    inputs = []
    compute_loss = trainer._compute_loss

    def recording(model, batch):
        inputs.append({k: v.detach().clone() for k, v in batch.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, batch)

    trainer._compute_loss = recording
    return inputs


def run(task, tmp_path, fail=lambda rows, log: False, trainer_class=DAPOTrainer, config_class=DAPOConfig, **overrides):
    config = toy_config(
        config_class, tmp_path, per_device_train_batch_size=PER_DEVICE_BATCH, gradient_accumulation_steps=2,
        steps_per_generation=STEPS_PER_GENERATION, max_steps=4, **overrides,
    )  # fmt: skip
    trainer = toy_trainer(trainer_class, config, task, reward_funcs=[HalfDegenerateReward(G)])
    log = watch_generate(trainer, fail)
    losses = loss_recorder(trainer)
    trainer.train()
    return trainer, log, losses


def sampling(trainer, key: str) -> list[float]:
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_without_a_memory_reading_a_rounds_calls_hold_one_generation_batch(task, tmp_path):
    """On CPU (no memory reading, so no plan) every call is at most GRPOTrainer's: one generation batch."""
    trainer, log, _ = run(task, tmp_path)
    assert len(log.turns) == sum(sampling(trainer, "dynamic_sampling/rounds"))
    for rows, calls in zip(log.turn_rows, log.turns, strict=True):
        assert calls == plan_rows(rows, GENERATION_ROWS)
    assert sum(log.turn_rows) == G * sum(sampling(trainer, "dynamic_sampling/generated_groups"))
    # Rounds larger than one generation batch occurred, and were cut.
    assert max(log.turn_rows) > GENERATION_ROWS
    assert trainer.dynamic_sampler.calls.last_plan is None and trainer.dynamic_sampler.calls.measured == []


def plan_rows(rows: int, cap: int) -> list[int]:
    return [cap] * (rows // cap) + ([rows % cap] if rows % cap else [])


def test_the_cap_cuts_each_round_into_calls_of_at_most_that_many_rows(task, tmp_path):
    cap = 8
    trainer, log, _ = run(task, tmp_path, max_rows_per_generate_call=cap)
    assert len(log.turns) == sum(sampling(trainer, "dynamic_sampling/rounds"))
    for rows, calls in zip(log.turn_rows, log.turns, strict=True):
        assert calls == plan_rows(rows, cap)
    assert any(len(calls) > 1 for calls in log.turns)


def test_an_out_of_memory_error_halves_the_call_loses_no_row_and_trains_the_same_groups(task, tmp_path, caplog):
    def first_large_call_fails(rows, log):
        return rows > GENERATION_ROWS - 1 and not log.failed

    with caplog.at_level(logging.WARNING, logger="trl_variants.dynamic_sampling.generate_calls"):
        hit, hit_log, hit_losses = run(copy.deepcopy(task), tmp_path / "oom", first_large_call_fails)
    capped, capped_log, capped_losses = run(task, tmp_path / "capped", max_rows_per_generate_call=GENERATION_ROWS // 2)

    assert hit_log.failed == [GENERATION_ROWS]
    warnings = [r.getMessage() for r in caplog.records if "ran out of memory" in r.getMessage()]
    assert warnings == [
        f"Generation ran out of memory in a generate call of {GENERATION_ROWS} rows on process 0; retrying it as "
        f"calls of at most {GENERATION_ROWS // 2} rows, the cap of every later call of this run (set "
        f"max_rows_per_generate_call={GENERATION_ROWS // 2} to start there)."
    ]
    # No row lost: every round's rows were generated, in calls of the halved size from then on.
    assert [sum(calls) for calls in hit_log.turns] == hit_log.turn_rows
    assert hit_log.turns == capped_log.turns
    # The same groups trained with the same completions, advantages and losses as with the halved size set as cap.
    assert len(hit_losses) == len(capped_losses) == 8
    for hit_batch, capped_batch in zip(hit_losses, capped_losses, strict=True):
        for key in ("prompt_ids", "completion_ids", "advantages"):
            assert torch.equal(hit_batch[key], capped_batch[key]), key
    assert sampling(hit, "loss") == sampling(capped, "loss")
    assert sampling(hit, "dynamic_sampling/generated_groups") == sampling(capped, "dynamic_sampling/generated_groups")


def test_a_group_that_does_not_fit_stops_with_what_to_change(task, tmp_path):
    with pytest.raises(RuntimeError, match="one group of num_generations=4 completions") as error:
        run(task, tmp_path, fail=lambda rows, log: True)
    assert CUDA_OOM in str(error.value)


def test_other_generation_errors_are_not_retried(task, tmp_path):
    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=PER_DEVICE_BATCH, max_steps=1)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    calls = []

    def broken_generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        raise RuntimeError("CUDA error: device-side assert triggered")

    trainer.model.generate = broken_generate
    with pytest.raises(RuntimeError, match="device-side assert"):
        trainer.train()
    assert calls == [PER_DEVICE_BATCH]


def test_the_cap_is_checked_against_the_group_size_and_the_backend(tmp_path):
    multiple = "max_rows_per_generate_call=6 is not allowed; expected a multiple of num_generations (4)"
    with pytest.raises(ValueError, match=re.escape(multiple)):
        toy_config(DAPOConfig, tmp_path, max_rows_per_generate_call=6)
    positive = "max_rows_per_generate_call=0 is not allowed; expected an integer >= 1, or None."
    with pytest.raises(ValueError, match=re.escape(positive)):
        toy_config(DAPOConfig, tmp_path, max_rows_per_generate_call=0)
    with pytest.raises(ValueError, match="None with use_vllm=True or use_transformers_continuous_batching=True"):
        toy_config(DAPOConfig, tmp_path, max_rows_per_generate_call=8, use_vllm=True)
    assert toy_config(DAPOConfig, tmp_path, max_rows_per_generate_call=8).max_rows_per_generate_call == 8


def test_a_vision_language_models_rows_are_cut_with_their_own_images(tmp_path):
    model, processor, dataset = llava_task()

    config = toy_config(
        DAPOConfig, tmp_path, per_device_train_batch_size=8, max_steps=1, shuffle_dataset=False,
        max_completion_length=8, max_rows_per_generate_call=G,
    )  # fmt: skip
    trainer = DAPOTrainer(model, [even_operand_reward], args=config, train_dataset=dataset, processing_class=processor)
    log = watch_generate(trainer)
    losses = loss_recorder(trainer)
    trainer.train()
    assert all(calls == [G] * (rows // G) for rows, calls in zip(log.turn_rows, log.turns, strict=True))
    (batch,) = losses
    assert_rows_carry_their_own_images(processor, batch)


def checkpointing_recorder(trainer) -> list[bool]:
    """Whether gradient checkpointing is on, at each loss computation."""
    states = []
    compute_loss = trainer._compute_loss

    def recording(model, batch):
        states.append(trainer.accelerator.unwrap_model(model).is_gradient_checkpointing)
        return compute_loss(model, batch)

    trainer._compute_loss = recording
    return states


def test_a_retry_leaves_gradient_checkpointing_on_in_every_loss_computation(task, tmp_path):
    config = toy_config(
        DAPOConfig, tmp_path, per_device_train_batch_size=PER_DEVICE_BATCH, gradient_accumulation_steps=2,
        steps_per_generation=STEPS_PER_GENERATION, max_steps=4, gradient_checkpointing=True,
    )  # fmt: skip
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    # The first call of the second generation batch (step 3 of 4, after four loss computations) fails once.
    log = watch_generate(trainer, lambda rows, log: trainer.state.global_step == 2 and not log.failed)
    checkpointing = checkpointing_recorder(trainer)
    trainer.train()
    assert len(log.failed) == 1 and log.failed[0] > G
    assert checkpointing == [True] * 8  # four loss computations before the error, four after it
    # Generation itself still ran with checkpointing off, as TRL turns it off for every call.
    assert trainer.accelerator.unwrap_model(trainer.model_wrapped).is_gradient_checkpointing


@pytest.mark.parametrize("dynamic_sampling", [True, False], ids=["dynamic_sampling", "without_dynamic_sampling"])
def test_the_cap_an_error_taught_is_kept_in_checkpoints(task, tmp_path, dynamic_sampling):
    overrides = dict(save_strategy="steps", save_steps=2, dynamic_sampling_carry_surplus=False,
                     dynamic_sampling=dynamic_sampling)  # fmt: skip
    first_fails = lambda rows, log: rows == GENERATION_ROWS and not log.failed  # noqa: E731
    hit, _, _ = run(copy.deepcopy(task), tmp_path, first_fails, **overrides)
    assert hit.dynamic_sampler.calls.learned_cap == GENERATION_ROWS // 2
    checkpoint = tmp_path / "checkpoint-2"
    state = json.loads((checkpoint / STATE_FILE).read_text())
    assert state["rows_per_call_after_oom"] == GENERATION_ROWS // 2

    config = toy_config(
        DAPOConfig, tmp_path, per_device_train_batch_size=PER_DEVICE_BATCH, gradient_accumulation_steps=2,
        steps_per_generation=STEPS_PER_GENERATION, max_steps=4, **overrides,
    )  # fmt: skip
    resumed = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    log = watch_generate(resumed)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    # From the resumed run's first call on, no call holds more than the learned cap.
    assert log.turns and all(max(calls) == GENERATION_ROWS // 2 for calls in log.turns)
    assert [sum(calls) for calls in log.turns] == log.turn_rows


def test_an_error_during_evaluation_does_not_cap_training_calls(task, tmp_path, caplog):
    config = toy_config(
        DAPOConfig, tmp_path, per_device_train_batch_size=PER_DEVICE_BATCH, gradient_accumulation_steps=2,
        steps_per_generation=STEPS_PER_GENERATION, max_steps=2, per_device_eval_batch_size=2 * G,
    )  # fmt: skip
    eval_dataset = task.train_dataset.select(range(4))
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)], eval_dataset=eval_dataset)
    log = watch_generate(trainer, lambda rows, log: not trainer.model.training and not log.failed)
    with caplog.at_level(logging.WARNING, logger="trl_variants.dynamic_sampling.generate_calls"):
        trainer.evaluate()
    assert log.failed == [2 * G]
    assert [r.getMessage() for r in caplog.records if "ran out of memory" in r.getMessage()] == [
        f"Generation ran out of memory in a generate call of {2 * G} rows on process 0; retrying it as calls of at "
        f"most {G} rows, in this evaluation only (training calls keep their size)."
    ]
    log.turns.clear(), log.turn_rows.clear()
    trainer.train()
    assert trainer.dynamic_sampler.calls.learned_cap is None
    assert log.turns == [plan_rows(rows, GENERATION_ROWS) for rows in log.turn_rows]
    assert max(log.turn_rows) > GENERATION_ROWS


def test_a_vision_language_models_fields_are_cut_only_when_a_call_is_split(tmp_path, monkeypatch):
    model, processor, dataset = llava_task()
    cut_rows, cut = [], generate_calls.rows_of_fields

    def recording_cut(fields, images, num_rows):
        cut_rows.append(num_rows)
        return cut(fields, images, num_rows)

    monkeypatch.setattr(generate_calls, "rows_of_fields", recording_cut)
    config = toy_config(
        DAPOConfig, tmp_path, per_device_train_batch_size=8, max_steps=1, shuffle_dataset=False, max_completion_length=8
    )  # fmt: skip
    trainer = DAPOTrainer(model, [even_operand_reward], args=config, train_dataset=dataset, processing_class=processor)
    log = watch_generate(trainer)
    trainer.train()
    batch_rows = config.per_device_train_batch_size * config.steps_per_generation
    # Cut (one generation batch per call, no memory reading here) exactly in the rounds larger than a batch.
    assert log.turns == [plan_rows(rows, batch_rows) for rows in log.turn_rows]
    assert cut_rows == [rows for rows in log.turn_rows if rows > batch_rows]
