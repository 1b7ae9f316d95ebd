"""The info line saying that clip-higher cannot act: the decision as a pure function, and the trainer logging it
once at construction in exactly that case."""

import logging

import pytest

from trl_variants.dapo.clip_higher import clip_higher_idle_reason

from .helpers import toy_config, toy_trainer


def reason(**overrides):
    settings = dict(epsilon=0.2, epsilon_high=0.28, loss_type="dapo", gradient_accumulation_steps=1,
                    steps_per_generation=1, num_iterations=1, carry_surplus=False)  # fmt: skip
    return clip_higher_idle_reason(**{**settings, **overrides})


def test_trls_default_layout_leaves_clip_higher_idle_and_the_line_says_how_to_make_it_act():
    line = reason(gradient_accumulation_steps=2, steps_per_generation=2)
    assert "epsilon_high=0.28 > epsilon=0.2" in line and "every policy ratio is 1" in line
    assert "steps_per_generation=4" in line and "num_iterations > 1" in line
    assert "carried" not in line
    # Several generations per optimizer step are still trained before any update.
    assert reason(gradient_accumulation_steps=4, steps_per_generation=2) is not None


def test_with_carrying_the_line_says_only_carried_groups_can_reach_the_clip():
    assert "only on carried surplus groups" in reason(carry_surplus=True)


@pytest.mark.parametrize("layout", [dict(steps_per_generation=4), dict(num_iterations=2),
                                    dict(gradient_accumulation_steps=2, steps_per_generation=4),
                                    dict(gradient_accumulation_steps=2, steps_per_generation=3)])
def test_no_line_where_an_update_falls_inside_a_generation_batch(layout):
    assert reason(**layout) is None


@pytest.mark.parametrize("clip", [dict(epsilon_high=None), dict(epsilon_high=0.2), dict(loss_type="cispo"),
                                  dict(loss_type="sapo")])
def test_no_line_where_clip_higher_is_not_asked_for(clip):
    assert reason(**clip) is None


@pytest.mark.parametrize("layout, logged", [({}, True), ({"steps_per_generation": 2}, False),
                                            ({"epsilon_high": 0.2}, False)])
def test_the_trainer_logs_the_line_once_exactly_when_clip_higher_cannot_act(toy_task, tmp_path, caplog, layout,
                                                                            logged):
    from trl_variants import DAPOConfig, DAPOTrainer

    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=8, **layout)
    with caplog.at_level(logging.INFO, logger="trl_variants.dapo.trainer"):
        toy_trainer(DAPOTrainer, config, toy_task)
    lines = [record.getMessage() for record in caplog.records if "Clip-higher" in record.getMessage()]
    assert len(lines) == int(logged), lines
    if logged:  # the default DAPOConfig carries here, so the line names the exception
        assert "only on carried surplus groups" in lines[0]


def clipped_shares(task, tmp_path, **layout):
    from trl_variants import DAPOConfig, DAPOTrainer

    # Without carrying: carried groups are trained one step after the policy that generated them, so their ratios
    # differ from 1 in any layout (the exception the line names).
    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=8, max_steps=4, learning_rate=1e-2,
                        dynamic_sampling_carry_surplus=False, **layout)  # fmt: skip
    trainer = toy_trainer(DAPOTrainer, config, task)
    trainer.train()
    return [entry["clip_ratio/region_mean"] for entry in trainer.state.log_history if "clip_ratio/region_mean" in entry]


def test_the_premise_holds_in_trl_the_clip_never_binds_in_the_default_layout_and_binds_across_updates(toy_task,
                                                                                                      tmp_path):
    """What the line claims, checked on TRL itself: with one optimizer step per generation batch no token is ever
    clipped (every ratio is exactly 1); with four updates per generation batch, at a large learning rate, some are."""
    import copy

    idle = clipped_shares(copy.deepcopy(toy_task), tmp_path / "idle")
    acting = clipped_shares(copy.deepcopy(toy_task), tmp_path / "acting", steps_per_generation=4)
    assert len(idle) == len(acting) == 4
    assert all(share == 0 for share in idle)
    assert any(share > 0 for share in acting)
