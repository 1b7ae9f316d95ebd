"""Dynamic sampling composes with every objective TRL implements: one `DAPOTrainer` step per `loss_type`, with the
overlong punishment and clip-higher on, trains only informative groups and moves the policy.

The half-degenerate reward (scripts/rewards.py) makes the groups of odd-operand prompts degenerate, so each step
must drop some groups and refill; what reaches the loss is checked against that reward's rule.
"""

import copy
import dataclasses

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dapo.config import TRL_LOSS_TYPES

from ..helpers import toy_config, toy_trainer
from .scripts.rewards import HalfDegenerateReward, is_live_prompt

G = 4


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


def objective_settings(loss_type: str) -> dict:
    """TRL's recommended companions: LUSPO is sequence-level, CISPO's cap on the importance weight is above 1."""
    if loss_type == "luspo":
        return {"importance_sampling_level": "sequence"}
    if loss_type == "cispo":
        return {"epsilon_high": 5.0}
    return {}


# The fast loop (pytest -m "not slow") trains DAPO's own objective here; tests/test_drop_in.py's loss_type settings
# train the others under dynamic sampling there too.
@pytest.mark.parametrize(
    "loss_type", [loss_type if loss_type == "dapo" else pytest.param(loss_type, marks=pytest.mark.slow)
                  for loss_type in TRL_LOSS_TYPES]
)  # fmt: skip
def test_each_objective_trains_informative_groups_under_dynamic_sampling(loss_type, task, tmp_path):
    config = toy_config(
        DAPOConfig, tmp_path, loss_type=loss_type, per_device_train_batch_size=8, num_generations=G, max_steps=1,
        overlong_buffer_length=2, **objective_settings(loss_type),
    )  # fmt: skip
    reward = HalfDegenerateReward(G)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward])
    scored = []
    generate_and_score = trainer._generate_and_score_completions

    def recording(inputs):
        output = generate_and_score(inputs)
        scored.append((task.tokenizer.batch_decode(output["prompt_ids"], skip_special_tokens=True), output))
        return output

    trainer._generate_and_score_completions = recording
    before = {name: param.detach().clone() for name, param in trainer.model.named_parameters()}
    trainer.train()

    assert (trainer.loss_type, trainer.epsilon_low) == (loss_type, 0.2)
    assert trainer.epsilon_high == (5.0 if loss_type == "cispo" else 0.28)
    assert trainer.reward_func_names[-1] == "soft_overlong_punishment"
    (prompts, output), = scored
    assert all(is_live_prompt(prompt) for prompt in prompts), "a degenerate group reached the loss"
    assert output["advantages"].abs().min() > 1e-3
    step_log = next(entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry)
    assert step_log["dynamic_sampling/kept_groups"] == 2 and step_log["dynamic_sampling/generated_groups"] > 2
    assert torch.isfinite(torch.tensor(step_log["loss"]))
    assert any(not torch.equal(before[name], param) for name, param in trainer.model.named_parameters())
