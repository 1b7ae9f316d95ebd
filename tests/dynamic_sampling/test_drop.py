"""`dynamic_sampling="drop"`: one generation batch per step, as `GRPOTrainer`, and the flat groups (on the sampling
metric) take no part in the update.

The reference: for every objective TRL implements, with and without the KL term, the loss and its gradient on a
batch whose flat rows were dropped equal TRL's own loss and gradient on a batch holding only the informative rows,
normaliser included; the flat rows get no gradient at all.
"""

import copy
import dataclasses
import logging
import math

import numpy as np
import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dapo.config import TRL_LOSS_TYPES
from trl_variants.dynamic_sampling.selection import (
    KEPT_ROWS_SCALE_KEY,
    NO_SIGNAL_STEPS,
    ROW_NORMALISED_LOSS_TYPES,
    dynamic_sampling_mode,
    kept_rows_loss_scale,
)

from ..helpers import toy_config, toy_trainer
from ..ref_setup import loss_and_grad_at, loss_trainer, random_loss_batch, record_scored_batches, saved_policy
from .scripts.rewards import ConstantReward, HalfDegenerateReward, ThreeWayAccuracyReward, is_live_prompt, prompt_class
from .test_loss_types import objective_settings

G = 4


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


# The pure parts.


@pytest.mark.parametrize(("value", "stored"), [(True, "regenerate"), ("regenerate", "regenerate"), ("drop", "drop"),
                                               (False, False), ("false", False), ("True", "regenerate")])  # fmt: skip
def test_the_mode_is_stored_in_one_form(value, stored):
    assert dynamic_sampling_mode(value) == stored
    assert DAPOConfig("out", use_cpu=True, report_to=[], dynamic_sampling=value).dynamic_sampling == stored


@pytest.mark.parametrize("value", ["keep", "Drop", 1, 0, None, "none"])
def test_any_other_mode_is_refused_in_one_line_naming_the_field(value):
    with pytest.raises(ValueError, match=r"^dynamic_sampling=.* is not allowed; expected True or \"regenerate\"") as error:
        dynamic_sampling_mode(value)
    assert "\n" not in str(error.value) and '"drop"' in str(error.value)


def test_the_loss_scale_counts_kept_rows_only_for_the_row_normalised_objectives():
    for loss_type in TRL_LOSS_TYPES:
        expected = 12 / 8 if loss_type in ROW_NORMALISED_LOSS_TYPES else 1.0
        assert kept_rows_loss_scale(loss_type, rows=12, kept_rows=8) == expected
    assert kept_rows_loss_scale("grpo", rows=12, kept_rows=0) == 0.0
    with pytest.raises(ValueError, match="kept_rows must be in"):
        kept_rows_loss_scale("grpo", rows=4, kept_rows=5)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"dynamic_sampling_carry_surplus": True}, "dynamic_sampling_carry_surplus"),
     ({"skip_degenerate_prompts": True}, "skip_degenerate_prompts"),
     ({"loss_type": "grpo", "entropy_coef": 0.01}, "loss_type")],
)  # fmt: skip
def test_settings_drop_cannot_honour_are_refused_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=rf"^{field}=.* is not allowed; expected .*drop"):
        DAPOConfig("out", use_cpu=True, report_to=[], dynamic_sampling="drop", **overrides)
    # The token-normalised objectives keep the entropy bonus as TRL computes it.
    DAPOConfig("out", use_cpu=True, report_to=[], dynamic_sampling="drop", loss_type="dapo", entropy_coef=0.01)


# The loss against the reference: TRL's loss on the informative rows alone.


def scored_rewards(rows: int, flat_groups: set[int], num_reward_funcs: int) -> torch.Tensor:
    """Rewards in TRL's layout (rows, reward functions): group `g` is flat when in `flat_groups`, else its rows
    score 0, 1, 0, 1, ... on every reward function."""
    column = torch.tensor([0.0 if row // G in flat_groups else float(row % 2) for row in range(rows)])
    return column.unsqueeze(1).repeat(1, num_reward_funcs)


def dropped_batch(trainer, inputs: dict, flat_groups: set[int]) -> dict:
    """The sampler's own masking (`drop_flat_groups`) of `inputs`, whose rewards mark `flat_groups` flat."""
    sampler = trainer.dynamic_sampler
    rows = inputs["completion_ids"].shape[0]
    sampler.scored_rewards = scored_rewards(rows, flat_groups, len(trainer.reward_funcs))
    return sampler.drop_flat_groups({key: value.clone() for key, value in inputs.items()})


def informative_rows(inputs: dict, kept: list[int]) -> dict:
    """The batch of the kept rows alone, with TRL's normaliser over their tokens."""
    index = torch.tensor(kept)
    batch = {key: value[index] if value.dim() > 0 else value for key, value in inputs.items()}
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    return batch


@pytest.fixture(scope="module")
def saved_model_path(shared_task, tmp_path_factory):
    return saved_policy(shared_task, tmp_path_factory.mktemp("toy-model"))


@pytest.mark.parametrize("beta", [0.0, 0.04], ids=["no-kl", "kl"])
@pytest.mark.parametrize("loss_type", TRL_LOSS_TYPES)
def test_the_gradient_equals_trls_on_a_batch_of_the_informative_rows_alone(loss_type, beta, task, tmp_path,
                                                                           saved_model_path):  # fmt: skip
    rows, flat_groups = 4 * G, {1, 3}
    settings = dict(loss_type=loss_type, beta=beta, per_device_train_batch_size=rows, num_generations=G,
                    **objective_settings(loss_type))  # fmt: skip
    model = saved_model_path if beta else None
    dropping = loss_trainer(DAPOTrainer, DAPOConfig, tmp_path / "drop", task, model, dynamic_sampling="drop",
                            **settings)  # fmt: skip
    reference = loss_trainer(DAPOTrainer, DAPOConfig, tmp_path / "ref", task, model, dynamic_sampling=False,
                             **settings)  # fmt: skip
    batch = random_loss_batch(task.tokenizer, rows=rows, width=5, seed=3)
    kept = [row for row in range(rows) if row // G not in flat_groups]
    flat = [row for row in range(rows) if row // G in flat_groups]

    inputs = dropped_batch(dropping, batch.inputs, flat_groups)
    assert inputs["completion_mask"][flat].sum() == 0
    assert torch.equal(inputs["completion_mask"][kept], batch.inputs["completion_mask"][kept])
    assert inputs["num_items_in_batch"] == int(batch.mask[kept].sum())
    loss, grad = loss_and_grad_at(dropping, inputs, batch.logps)
    expected_loss, expected_grad = loss_and_grad_at(reference, informative_rows(batch.inputs, kept), batch.logps[kept])

    assert math.isclose(loss, expected_loss, rel_tol=1e-5, abs_tol=1e-7)
    np.testing.assert_allclose(grad[kept], expected_grad, rtol=1e-5, atol=1e-8)
    assert not grad[flat].any(), "a flat row took part in the update"
    assert np.abs(grad[kept]).sum() > 0


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_the_normaliser_spans_the_generation_batch_over_accumulated_micro_batches(loss_type, task, tmp_path):
    """Two accumulated micro-batches of one generation batch: the summed gradient equals TRL's on the informative
    rows alone, split in two micro-batches as TRL splits a generation batch."""
    rows, flat_groups = 4 * G, {0, 1, 3}  # the first micro-batch holds no informative row
    settings = dict(loss_type=loss_type, per_device_train_batch_size=rows // 2, gradient_accumulation_steps=2,
                    num_generations=G)  # fmt: skip
    dropping = loss_trainer(DAPOTrainer, DAPOConfig, tmp_path / "drop", task, dynamic_sampling="drop", **settings)
    reference = loss_trainer(DAPOTrainer, DAPOConfig, tmp_path / "ref", task, dynamic_sampling=False,
                             **{**settings, "per_device_train_batch_size": G // 2})  # fmt: skip
    batch = random_loss_batch(task.tokenizer, rows=rows, width=5, seed=4)
    kept = [row for row in range(rows) if row // G not in flat_groups]
    inputs = dropped_batch(dropping, batch.inputs, flat_groups)
    assert inputs["num_items_in_batch"] == int(batch.mask[kept].sum())

    def accumulated(trainer, batch_inputs: dict, logps: np.ndarray) -> np.ndarray:
        half = logps.shape[0] // 2
        parts = [{key: value[part] if value.dim() > 0 else value for key, value in batch_inputs.items()}
                 for part in (slice(0, half), slice(half, None))]  # fmt: skip
        return np.concatenate([loss_and_grad_at(trainer, part, logps[rows])[1]
                               for part, rows in zip(parts, (slice(0, half), slice(half, None)), strict=True)])

    grad = accumulated(dropping, inputs, batch.logps)
    expected = accumulated(reference, informative_rows(batch.inputs, kept), batch.logps[kept])
    np.testing.assert_allclose(grad[kept], expected, rtol=1e-5, atol=1e-8)
    assert not np.delete(grad, kept, axis=0).any()


# Real training steps on the toy task.


def drop_trainer(task, tmp_path, reward_funcs, **overrides):
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling="drop", per_device_train_batch_size=4 * G,
                        num_generations=G, **overrides)  # fmt: skip
    return toy_trainer(DAPOTrainer, config, task, reward_funcs=reward_funcs)


def test_a_step_generates_one_batch_and_trains_only_its_informative_groups(task, tmp_path):
    reward = HalfDegenerateReward(G)
    trainer = drop_trainer(task, tmp_path, [reward], max_steps=2)
    scored = record_scored_batches(trainer)
    before = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    trainer.train()

    # As `GRPOTrainer`: one scoring call of one generation batch per step, nothing generated beside it.
    assert len(scored) == 2 and reward.rows_scored == 2 * 4 * G
    for call, output in zip(reward.calls, scored, strict=True):
        live = torch.tensor([is_live_prompt(prompt) for prompt in call["prompts"]])
        assert output["completion_ids"].shape[0] == 4 * G
        assert output["completion_mask"][~live].sum() == 0, "a flat group's tokens reached the loss"
        assert output["completion_mask"][live].sum(dim=1).min() > 0
        assert output["num_items_in_batch"] == output["completion_mask"][live].sum()
        assert output[KEPT_ROWS_SCALE_KEY] == 1.0  # "dapo" divides by the kept tokens
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_rows_frac" in entry]
    assert len(logged) == 2
    for entry, call in zip(logged, reward.calls, strict=True):
        live_share = sum(map(is_live_prompt, call["prompts"])) / (4 * G)
        assert entry["dynamic_sampling/kept_rows_frac"] == pytest.approx(live_share)
        assert entry["dynamic_sampling/pass_rate"] == pytest.approx(live_share)
        assert entry["dynamic_sampling/generated_groups"] == 4
        assert "dynamic_sampling/rounds" not in entry
    assert any(not torch.equal(before[name], param) for name, param in trainer.model.named_parameters())


def test_flat_on_the_sampling_metric_is_dropped_though_the_overlong_punishment_differs(task, tmp_path):
    """All-correct groups are flat on accuracy; the soft overlong punishment still gives them non-zero advantages,
    which regeneration would not train, and neither does "drop"."""
    trainer = drop_trainer(task, tmp_path, [ThreeWayAccuracyReward()], max_steps=4, overlong_buffer_length=4,
                           loss_type="grpo")  # fmt: skip
    outputs = record_scored_batches(trainer)
    trainer.train()
    mixed_steps = 0
    for output in outputs:
        prompts = task.tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True)
        live = torch.tensor([prompt_class(prompt) == 0 for prompt in prompts])
        assert output["completion_mask"][~live].sum() == 0
        expected_scale = len(prompts) / int(live.sum()) if live.any() else 0.0
        assert output[KEPT_ROWS_SCALE_KEY].item() == pytest.approx(expected_scale)
        mixed_steps += bool(live.any() and (output["advantages"][~live].abs() > 1e-6).any())
    assert mixed_steps, "no step held both a live group and a flat one with non-zero advantages"


def test_a_step_whose_groups_are_all_flat_trains_with_loss_zero_and_warns_once(task, tmp_path, caplog):
    trainer = drop_trainer(task, tmp_path, [ConstantReward()], max_steps=NO_SIGNAL_STEPS + 1)
    before = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    with caplog.at_level(logging.WARNING, logger="trl_variants.dynamic_sampling.sampler"):
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses == [0.0] * (NO_SIGNAL_STEPS + 1)
    warnings = [r.getMessage() for r in caplog.records if "no informative group" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"Dynamic sampling found no informative group in {NO_SIGNAL_STEPS}")
    assert all(torch.equal(before[name], param) for name, param in trainer.model.named_parameters())
