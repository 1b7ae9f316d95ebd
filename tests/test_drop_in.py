"""The drop-in promise, setting by setting: what trains under `GRPOTrainer` trains under `DAPOTrainer` with
dynamic sampling on, regenerating (the default) and dropping flat groups (`dynamic_sampling="drop"`).

Each setting is one row of `SETTINGS`: the same config fields and trainer arguments are given to
`GRPOTrainer`/`GRPOConfig` and to `DAPOTrainer`/`DAPOConfig`, and both must train a step that moves the weights
(the adapter's under PEFT). A setting that `DAPOTrainer` refuses or breaks fails here first. The settings that
need their own models (tool calling, environments, vision-language models) are in
tests/dynamic_sampling/test_replay.py, where both trainers run too.
"""

import asyncio
import copy
import dataclasses

import pytest
import torch
from peft import LoraConfig
from transformers import Qwen2Config, Qwen2ForSequenceClassification
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer

from .dynamic_sampling.scripts.rewards import HalfDegenerateReward, is_live_prompt
from .helpers import baseline_in_full_suite, toy_config, toy_trainer

G = 4


def half_degenerate():
    return HalfDegenerateReward(G)


def live_length_reward(completions, prompts, **kwargs):
    """Informative on live prompts (completions differ in length), None elsewhere: exercises TRL's None rewards."""
    return [float(len(c)) if is_live_prompt(p) else None for p, c in zip(prompts, completions, strict=True)]


async def async_half_degenerate(prompts, completions, **kwargs):
    await asyncio.sleep(0)
    return [float(i % G) if is_live_prompt(p) else 0.0 for i, p in enumerate(prompts)]


def reward_model(tokenizer):
    """A tiny random sequence classifier: continuous scores, so every group is informative."""
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, num_labels=1, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    return Qwen2ForSequenceClassification(config)


@dataclasses.dataclass
class Setting:
    config: dict = dataclasses.field(default_factory=dict)
    rewards: object = None  # a callable returning the reward functions; the half-degenerate reward by default
    trainer: dict = dataclasses.field(default_factory=dict)
    stream: bool = False
    evaluate: bool = False
    model_path: bool = False  # the policy passed as a saved folder, from which TRL builds the reference model


SETTINGS = {
    **{
        f"loss_type={loss}": Setting(config={"loss_type": loss, **extra})
        for loss, extra in {
            "grpo": {}, "bnpo": {}, "dr_grpo": {}, "cispo": {"epsilon_high": 5.0}, "sapo": {},
            "luspo": {"importance_sampling_level": "sequence"}, "vespo": {},
        }.items()
    },  # fmt: skip
    "several rewards, weights, None rewards": Setting(
        config={"reward_weights": [1.0, 0.5]}, rewards=lambda: [half_degenerate(), live_length_reward]
    ),
    "normalize_then_sum": Setting(
        config={"multi_objective_aggregation": "normalize_then_sum"},
        rewards=lambda: [half_degenerate(), live_length_reward],
    ),
    "async reward": Setting(rewards=lambda: [async_half_degenerate]),
    "reward model": Setting(rewards="reward model"),
    "sequence importance sampling": Setting(config={"importance_sampling_level": "sequence", "loss_type": "grpo"}),
    "delta": Setting(config={"delta": 1.5}),
    "entropy mask": Setting(config={"top_entropy_quantile": 0.2}),
    "entropy bonus": Setting(config={"entropy_coef": 0.01}),
    "num_iterations and steps_per_generation": Setting(
        config={"num_iterations": 2, "steps_per_generation": 2, "per_device_train_batch_size": 4}
    ),
    "beta (reference model)": Setting(config={"beta": 0.04}, model_path=True),
    "scale_rewards=batch": Setting(config={"scale_rewards": "batch"}),
    "mask_truncated_completions": Setting(config={"mask_truncated_completions": True}),
    "PEFT (LoRA)": Setting(
        trainer={"peft_config": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           task_type="CAUSAL_LM")}
    ),  # fmt: skip
    "evaluation": Setting(config={"eval_strategy": "steps", "eval_steps": 1, "per_device_eval_batch_size": 8},
                          evaluate=True),  # fmt: skip
    "streaming dataset": Setting(config={"dataloader_num_workers": 2}, stream=True),
}

TRAINERS = {"GRPOTrainer": (GRPOTrainer, GRPOConfig, {}), "DAPOTrainer": (DAPOTrainer, DAPOConfig, {}),
            'DAPOTrainer, dynamic_sampling="drop"': (DAPOTrainer, DAPOConfig, {"dynamic_sampling": "drop"})}


@pytest.fixture(scope="module")
def shared(_warm_toy_task):
    return _warm_toy_task


@pytest.mark.parametrize("trainer_name", baseline_in_full_suite(TRAINERS))
@pytest.mark.parametrize("setting_name", SETTINGS)
def test_setting_trains_under_both_trainers(setting_name, trainer_name, shared, tmp_path):
    setting = SETTINGS[setting_name]
    trainer_class, config_class, trainer_settings = TRAINERS[trainer_name]
    task = dataclasses.replace(shared, model=copy.deepcopy(shared.model))
    # Unshuffled, the first batch holds a live prompt, so that GRPOTrainer's batch has signal too.
    config = toy_config(
        config_class, tmp_path / "run",
        **{"per_device_train_batch_size": 8, "max_steps": 1, "shuffle_dataset": False, **trainer_settings,
           **setting.config},
    )  # fmt: skip
    if config_class is DAPOConfig:
        assert config.dynamic_sampling
    if setting.rewards == "reward model":
        rewards = [half_degenerate(), reward_model(task.tokenizer)]
        extra_rewards = {"reward_processing_classes": [None, task.tokenizer]}
    else:
        rewards = setting.rewards() if setting.rewards else [half_degenerate()]
        extra_rewards = {}
    train_dataset = task.train_dataset.to_iterable_dataset() if setting.stream else task.train_dataset
    extra = {**setting.trainer, **extra_rewards}
    if setting.evaluate:
        extra["eval_dataset"] = task.eval_dataset.select(range(2))
    if setting.model_path:
        task.model.save_pretrained(tmp_path / "policy")
        task = dataclasses.replace(task, model=str(tmp_path / "policy"))
    trainer = toy_trainer(trainer_class, config, task, reward_funcs=rewards, train_dataset=train_dataset, **extra)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()

    assert trainer.state.global_step == 1
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(value, after[name]) for name, value in before.items()), "no weight moved"
    if setting.evaluate:
        assert any("eval_loss" in entry for entry in trainer.state.log_history)
    if setting.stream:
        assert trainer.args.dataloader_num_workers == 0
    if config_class is DAPOConfig and config.dynamic_sampling == "drop":
        (entry,) = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_rows_frac" in entry]
        assert 0 < entry["dynamic_sampling/kept_rows_frac"] < 1  # the half-degenerate reward: some groups flat
    elif trainer_class is DAPOTrainer:
        (entry,) = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_groups" in entry]
        assert entry["dynamic_sampling/filled"] == 0.0
