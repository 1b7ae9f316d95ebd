"""Dynamic sampling with tool calling, environments and a vision-language model, each next to `GRPOTrainer`.

The models are tiny and built locally (scripts/chat_models.py). Generation is biased toward complete tool calls,
so TRL's own parser and tool loop run real calls, some valid and some failing. What is checked for `DAPOTrainer`:

- tools: the tool runs during generation; TRL's tool loop sees each generated rollout once (never again in the
  replay); every trained row's tool mask hides exactly its tool response; `tools/call_frequency` and
  `tools/failure_frequency` are those of the trained rows, as `GRPOTrainer` logs them for its batch;
- environments: one `reset` per generated rollout, dropped groups' included; each episode is scored once, before any
  later reset, and the reward function sees the environment's observation in the prompt;
- vision-language model: each trained row's image inputs are its own prompt's image.
"""

import re

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer

from ..helpers import baseline_in_full_suite, toy_config
from .scripts.chat_models import (
    BAD_CALL,
    GOOD_CALL,
    IMAGE_TOKEN,
    CountingEnvironment,
    llava_task,
    make_episode_reward,
    prompt_image,
    tool_call_task,
)

G = 4
TRAINERS = {"GRPOTrainer": (GRPOTrainer, GRPOConfig), "DAPOTrainer": (DAPOTrainer, DAPOConfig)}
# The tool response as TRL appends it after the model's end-of-turn token, hidden from the loss.
SUFFIX = re.compile(r"\n<\|im_start\|>user\n<tool_response>\n.*\n</tool_response><\|im_end\|>\n"
                    r"<\|im_start\|>assistant\n", re.DOTALL)  # fmt: skip


def config(config_class, tmp_path, **overrides):
    return toy_config(
        config_class, tmp_path,
        **{"per_device_train_batch_size": 8, "max_steps": 1, "shuffle_dataset": False, **overrides},
    )  # fmt: skip


def record_loss_inputs(trainer) -> list[dict]:
    inputs = []
    compute_loss = trainer._compute_loss

    def recording(model, batch):
        inputs.append({k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
        return compute_loss(model, batch)

    trainer._compute_loss = recording
    return inputs


def generated_rows(trainer) -> int:
    return sum(entry["dynamic_sampling/generated_groups"] * G for entry in trainer.state.log_history
               if "dynamic_sampling/generated_groups" in entry)  # fmt: skip


def trained_something(trainer, before) -> bool:
    return any(not torch.equal(before[name], param) for name, param in trainer.model.named_parameters())


# Tools


def calls_multiply(completions, **kwargs):
    """1 when the rollout called the tool (a tool response follows), else 0: groups mix both under the bias."""
    return [float(any(message["role"] == "tool" for message in completion)) for completion in completions]


def tool_settings(tmp_path, config_class, bias):
    return config(
        config_class, tmp_path, max_completion_length=112, max_tool_calling_iterations=1,
        generation_kwargs={"sequence_bias": bias}, dynamic_sampling_max_rounds=6,
    ) if config_class is DAPOConfig else config(
        config_class, tmp_path, max_completion_length=112, max_tool_calling_iterations=1,
        generation_kwargs={"sequence_bias": bias},
    )  # fmt: skip


@pytest.mark.parametrize("trainer_name", baseline_in_full_suite(TRAINERS))
def test_tools_run_once_per_rollout_and_the_trained_rows_keep_their_tool_masks(trainer_name, tmp_path, monkeypatch):
    trainer_class, config_class = TRAINERS[trainer_name]
    model, tokenizer, dataset, bias = tool_call_task()
    executed = []

    def multiply(a: int, b: int) -> int:
        executed.append((a, b))
        return a * b

    multiply.__doc__ = CountingEnvironment.multiply.__doc__  # the tool's schema, read by TRL from the docstring

    looped_rows = []
    tool_call_loop = GRPOTrainer._tool_call_loop

    def counting_loop(self, prompts, *args):
        looped_rows.append(len(prompts))
        return tool_call_loop(self, prompts, *args)

    monkeypatch.setattr(GRPOTrainer, "_tool_call_loop", counting_loop)
    trainer = trainer_class(
        model, [calls_multiply], args=tool_settings(tmp_path, config_class, bias), train_dataset=dataset,
        processing_class=tokenizer, tools=[multiply],
    )  # fmt: skip
    inputs = record_loss_inputs(trainer)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    assert executed and set(executed) == {(3, 4)}, "the tool must have run during generation"
    assert trained_something(trainer, before)
    (batch,) = inputs
    calls = failures = 0
    for ids, completion_mask, tool_mask in zip(batch["completion_ids"], batch["completion_mask"], batch["tool_mask"],
                                               strict=True):  # fmt: skip
        ids, tool_mask = ids[completion_mask.bool()].tolist(), tool_mask[completion_mask.bool()].tolist()
        hidden = [i for i, flag in enumerate(tool_mask) if flag == 0]
        text = tokenizer.decode(ids)
        if "<tool_response>" in text:
            assert hidden == list(range(hidden[0], hidden[-1] + 1)), "the tool response must be one masked span"
            assert SUFFIX.fullmatch(tokenizer.decode([ids[i] for i in hidden]))
        else:
            assert not hidden
        first_turn = tokenizer.decode(ids[: hidden[0]] if hidden else ids)
        calls += first_turn.count(GOOD_CALL) + first_turn.count(BAD_CALL)
        failures += first_turn.count(BAD_CALL)
    entry = next(entry for entry in trainer.state.log_history if "tools/call_frequency" in entry)
    assert entry["tools/call_frequency"] == pytest.approx(calls / len(batch["completion_ids"]))
    assert entry["tools/failure_frequency"] == pytest.approx(failures / calls if calls else 0.0)
    if trainer_class is DAPOTrainer:
        assert sum(looped_rows) == generated_rows(trainer), "the tool loop ran again in the replay"
        advantages = batch["advantages"].view(-1, G)
        assert (advantages.abs().amax(dim=1) > 0).all(), "a degenerate group was trained"
    else:
        assert sum(looped_rows) == 8


# Environments


@pytest.mark.parametrize("trainer_name", baseline_in_full_suite(TRAINERS))
def test_environments_reset_once_per_rollout_and_score_each_episode_once(trainer_name, tmp_path):
    trainer_class, config_class = TRAINERS[trainer_name]
    model, tokenizer, dataset, bias = tool_call_task()
    CountingEnvironment.log = []
    scored = []
    trainer = trainer_class(
        model, [make_episode_reward(scored)], args=tool_settings(tmp_path, config_class, bias), train_dataset=dataset,
        processing_class=tokenizer, environment_factory=CountingEnvironment,
    )  # fmt: skip
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    assert trained_something(trainer, before)
    episodes = [entry["episode"] for entry in CountingEnvironment.log]
    rollouts = generated_rows(trainer) if trainer_class is DAPOTrainer else 8
    assert len(episodes) == rollouts, "one reset per generated rollout"
    assert sorted(entry["episode"] for entry in scored) == episodes, "each episode scored once"
    assert all(entry["sees_observation"] for entry in scored)


# Vision-language model


def text_of(prompt) -> str:
    content = prompt[-1]["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


def even_operand_reward(prompts, completions, **kwargs):
    """Informative for even first operands (the completion's position in its group), 0 for odd ones."""
    return [float(i % G) if int(text_of(p).split("+")[0]) % 2 == 0 else 0.0 for i, p in enumerate(prompts)]


def assert_rows_carry_their_own_images(processor, batch: dict) -> list[str]:
    """Checks that each row of a trained batch has its own prompt's image inputs; returns the rows' `a+b=` texts."""
    prompts = processor.tokenizer.batch_decode(batch["prompt_ids"])
    # The prompts were generated from with their image: its placeholder is expanded to the image's 4 features.
    assert all(prompt.count(IMAGE_TOKEN) == 4 for prompt in prompts)
    texts = [re.search(r"\d\+\d=", prompt).group() for prompt in prompts]
    expected = processor.image_processor(images=[prompt_image(text) for text in texts], return_tensors="pt")
    torch.testing.assert_close(batch["pixel_values"], expected["pixel_values"])
    return texts


@pytest.mark.parametrize("trainer_name", baseline_in_full_suite(TRAINERS))
def test_each_trained_row_carries_its_own_image(trainer_name, tmp_path):
    trainer_class, config_class = TRAINERS[trainer_name]
    model, processor, dataset = llava_task()
    trainer = trainer_class(
        model, [even_operand_reward], args=config(config_class, tmp_path, max_completion_length=8),
        train_dataset=dataset, processing_class=processor,
    )  # fmt: skip
    inputs = record_loss_inputs(trainer)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    assert trained_something(trainer, before)
    (batch,) = inputs
    texts = assert_rows_carry_their_own_images(processor, batch)
    if trainer_class is DAPOTrainer:
        assert all(int(text[0]) % 2 == 0 for text in texts), "a degenerate group was trained"
        assert generated_rows(trainer) > 8
