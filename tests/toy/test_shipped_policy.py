"""The warm-started policy shipped for `make_toy_task`'s defaults: loaded instead of trained, with partial skill on
the task, and what `scripts/build_toy_policy.py` trains (bit for bit on the kind of machine that trained it)."""

import json

import pytest
import torch

import trl_variants.toy.policy as policy
from trl_variants.toy import build_tiny_model, greedy_accuracy, make_toy_task
from trl_variants.toy.policy import SHIPPED_SETTINGS, policy_metadata, train_shipped_policy


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the default policy is loaded, never trained")

    monkeypatch.setattr(policy, "warm_start", refuse)


def partial_skill(model, task) -> float:
    """Greedy accuracy on every problem; DAPO needs a policy that is right on some and wrong on others."""
    return greedy_accuracy(model, task.tokenizer, task.train_problems + task.eval_problems)


def test_the_defaults_load_the_shipped_policy_and_it_has_partial_skill(no_training):
    task = make_toy_task(seed=0)
    assert json.loads(policy_metadata()["settings"]) == SHIPPED_SETTINGS
    assert not task.model.training
    assert task.model.lm_head.weight is task.model.model.embed_tokens.weight  # still tied once loaded
    untrained = build_tiny_model(task.tokenizer, seed=0)
    shipped_skill = partial_skill(task.model, task)
    assert 0.1 < shipped_skill < 0.9
    assert shipped_skill > partial_skill(untrained, task) + 0.1


def test_other_settings_warm_start_a_new_policy(monkeypatch):
    calls = []
    warm_start = policy.warm_start
    monkeypatch.setattr(policy, "warm_start", lambda *args: calls.append(args[3]) or warm_start(*args))
    make_toy_task(seed=1, warm_start_steps=2)
    make_toy_task(seed=0, warm_start_steps=2)
    assert calls == [2, 2]


def test_the_build_script_trains_the_shipped_policy(no_training, monkeypatch):
    task = make_toy_task(seed=0)
    monkeypatch.undo()
    retrained = train_shipped_policy()
    shipped, fresh = task.model.state_dict(), retrained.state_dict()
    assert {name: tensor.shape for name, tensor in shipped.items()} == {name: t.shape for name, t in fresh.items()}
    metadata = policy_metadata()
    if {key: metadata[key] for key in ("cpu", "kernels", "torch")} == policy.this_machine():
        # Computed alike: the same processor, kernels and torch train the same bits.
        assert all(torch.equal(shipped[name], fresh[name]) for name in shipped)
    else:
        assert 0.1 < partial_skill(retrained, task) < 0.9
