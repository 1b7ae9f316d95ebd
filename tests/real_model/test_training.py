"""The trainers on a real pretrained instruct model: SmolLM2-135M-Instruct, its ChatML template, `<|im_end|>` as
both end and pad token, tied embeddings; reasoning-gym prompts scored by the task's verifier.

Only structure and invariants are asserted (masks, end tokens, lengths, penalty values against the paper's formula,
reload and resume equality), never a trained accuracy: those follow the CPU's floating-point arithmetic."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer
from trl_variants.rewards.overlong import SoftOverlongPunishment

from ..ref_formulas import soft_overlong_punishment
from ..test_model_card_quick_start import quick_start_code, run_snippet
from .conftest import TINY_RUN

pytestmark = pytest.mark.real_model

END = 2  # <|im_end|>


def record_losses_inputs(trainer) -> list[dict]:
    """Keeps the batches the loss is computed on (a spy: the method runs unchanged)."""
    seen, compute = [], trainer._compute_loss

    def spy(model, inputs):
        seen.append({key: value.detach().clone() for key, value in inputs.items() if torch.is_tensor(value)})
        return compute(model, inputs)

    trainer._compute_loss = spy
    return seen


def record_punishments(trainer) -> list[tuple[int, float]]:
    """(completion length, punishment) of every completion the soft overlong punishment scores."""
    (punishment,) = [func for func in trainer.reward_funcs if isinstance(func, SoftOverlongPunishment)]
    seen, unit = [], punishment._unit_punishment

    def spy(completion_ids, **kwargs):
        values = unit(completion_ids, **kwargs)
        seen.extend((len(ids), value * punishment.penalty_factor) for ids, value in zip(completion_ids, values))
        return values

    punishment._unit_punishment = spy
    return seen


def test_the_cached_conversion_is_a_plain_transformers_model(smollm2, smollm2_path):
    model, tokenizer = smollm2
    assert not hasattr(model.config, "quantization_config")
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.get_input_embeddings().weight
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == END == model.generation_config.eos_token_id
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in rendered
    assert sum(parameter.numel() for parameter in model.parameters()) == 134_515_008


def test_dapo_dynamic_sampling_with_skipping_and_carrying_on_the_chat_template(smollm2, arithmetic, tmp_path):
    """End token = pad token: each trained completion is masked right after its first `<|im_end|>` and the soft
    overlong punishment sees the real lengths; informative groups only are trained."""
    (model, tokenizer), (train, _) = smollm2, arithmetic
    config = DAPOConfig(
        str(tmp_path), **TINY_RUN, max_steps=2, overlong_buffer_length=6,
        skip_degenerate_prompts=True, dynamic_sampling_carry_surplus=True,
    )
    trainer = DAPOTrainer(model, [train.reward_func], args=config, train_dataset=train.dataset,
                          processing_class=tokenizer)
    batches, punishments = record_losses_inputs(trainer), record_punishments(trainer)
    trainer.train()

    assert len(batches) == 2
    for batch in batches:
        ids, mask = batch["completion_ids"], batch["completion_mask"]
        assert ids.shape[1] <= config.max_completion_length
        for row_ids, row_mask in zip(ids, mask):
            ends = (row_ids == END).nonzero().flatten()
            length = int(ends[0]) + 1 if len(ends) else config.max_completion_length
            assert row_mask[:length].all() and not row_mask[length:].any()
            assert (row_ids[length:] == END).all()  # padding after the end token is the pad (= end) token
        groups = batch["advantages"].view(-1, config.num_generations)
        assert (groups.abs().sum(dim=1) > 0).all()  # every trained group is informative
    assert punishments and {length for length, _ in punishments} & set(range(7, 12))  # lengths inside the buffer
    for length, value in punishments:
        assert value == pytest.approx(soft_overlong_punishment(length, 12, 6))
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_groups" in entry]
    assert [entry["dynamic_sampling/kept_groups"] for entry in logged] == [2, 2]
    assert all("dynamic_sampling/carried_groups" in entry for entry in logged)


def test_dr_grpo_trains_saves_reloads_generates_and_its_card_runs(smollm2, arithmetic, tmp_path, monkeypatch):
    (model, tokenizer), (train, _) = smollm2, arithmetic
    output_dir = tmp_path / "model"
    config = DrGRPOConfig(str(output_dir), **TINY_RUN, max_steps=1)
    trainer = DrGRPOTrainer(model, [train.reward_func], args=config, train_dataset=train.dataset,
                            processing_class=tokenizer)
    trainer.train()
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["loss"]))
    trainer.save_model(str(output_dir))
    trainer.create_model_card()

    reloaded = AutoModelForCausalLM.from_pretrained(output_dir)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert reloaded.lm_head.weight is reloaded.get_input_embeddings().weight
    trained_state, reloaded_state = trainer.model.state_dict(), reloaded.state_dict()
    assert trained_state.keys() == reloaded_state.keys()
    assert all(torch.equal(trained_state[key], reloaded_state[key]) for key in trained_state)
    assert reloaded_tokenizer.chat_template == tokenizer.chat_template

    text = tokenizer.apply_chat_template(train.dataset[0]["prompt"], tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(text, return_tensors="pt")
    outputs = [m.eval().generate(**inputs, max_new_tokens=8, do_sample=False) for m in (trainer.model, reloaded)]
    assert torch.equal(*outputs)

    code = quick_start_code((output_dir / "README.md").read_text(encoding="utf-8"))
    assert f'model="{output_dir}"' in code
    assert run_snippet(code.replace("max_new_tokens=128", "max_new_tokens=8"), tmp_path, monkeypatch).strip()


class InterruptAfterLoggingStep(TrainerCallback):
    """Stands in for Ctrl-C: raises KeyboardInterrupt once `step` has been trained and logged, before it is saved."""

    def __init__(self, step: int):
        self.step = step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.step and "loss" in (logs or {}):
            raise KeyboardInterrupt


def test_resume_from_a_checkpoint_logs_the_uninterrupted_runs_losses(smollm2_path, arithmetic, tmp_path):
    from trl_variants.smollm2 import load_smollm2

    train, _ = arithmetic

    def trainer_for(output_dir, callbacks=()):
        model, tokenizer = load_smollm2()
        settings = {**TINY_RUN, "save_strategy": "steps", "save_steps": 1}
        config = DAPOConfig(str(output_dir), **settings, max_steps=2, overlong_buffer_length=6)
        return DAPOTrainer(model, [train.reward_func], args=config, train_dataset=train.dataset,
                           processing_class=tokenizer, callbacks=list(callbacks))

    def losses(trainer):
        return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}

    # The run is stopped only after its last step was trained and logged: its log up to there is the uninterrupted
    # run's, so no second full run is trained (a 135M-parameter model: the largest cost of this test). Ctrl-C then
    # comes before step 2 is saved, so the last complete checkpoint is step 1's.
    interrupted = trainer_for(tmp_path / "run", [InterruptAfterLoggingStep(2)])
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    assert sorted(losses(interrupted)) == [1, 2]
    assert sorted(name for name in os.listdir(tmp_path / "run") if name.startswith("checkpoint")) == ["checkpoint-1"]
    resumed = trainer_for(tmp_path / "run")
    resumed.train(resume_from_checkpoint=True)
    # Step 1 comes from the checkpoint's log; step 2 was trained after the resume. Computed alike on this machine:
    # model, optimizer, RNG, data order and dynamic-sampling state are restored.
    assert losses(resumed) == losses(interrupted) and sorted(losses(resumed)) == [1, 2]
