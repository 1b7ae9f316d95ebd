"""Prompt skipping, `DrGRPOTrainer`, evaluation and checkpoint/resume, each generating with real vLLM (colocate)."""

import json
from collections import Counter

import pytest
import torch
from transformers import AutoModelForCausalLM

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from ..dynamic_sampling.scripts.rewards import HalfDegenerateReward
from .helpers import VLLMRecorder, engine_weight_error, loss_rows, vllm_config, vllm_trainer

pytestmark = pytest.mark.vllm

G = 4
ROWS = 16  # per step


def decoded_prompts(trainer, calls) -> Counter:
    tokenizer = trainer.processing_class
    return Counter(tokenizer.decode(ids, skip_special_tokens=True) for call in calls for ids in call.prompt_ids)


def dynamic_sampling_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]


def test_skipped_prompts_never_reach_vllm(shared_engine, vllm_policy, tmp_path):
    task, folder = vllm_policy
    # A step of 0.5 takes the explore probability to its floor within two steps, so skipping shows early.
    config = vllm_config(DAPOConfig, tmp_path, max_steps=6, skip_degenerate_prompts=True, skip_probability_step=0.5)
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
    recorder = VLLMRecorder(trainer)
    picks = []
    pick = trainer.dynamic_sampler.skipper.pick

    def recording_pick(first, needed, step):
        picked = pick(first, needed, step)
        picks.append({"step": trainer.state.global_step, "picked": picked})
        return picked

    trainer.dynamic_sampler.skipper.pick = recording_pick
    trainer.train()
    prompts = task.train_dataset["prompt"]
    logs = dynamic_sampling_logs(trainer)
    assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in logs) > 0, "the run must skip to test it"
    for step, entry in enumerate(logs):
        calls = recorder.train_calls(step)
        assert len(calls) == entry["dynamic_sampling/rounds"]
        step_picks = [p["picked"] for p in picks if p["step"] == step]
        # vLLM generated exactly the prompts that passed the skip rule, each G times: nothing skipped was generated.
        assert decoded_prompts(trainer, calls) == Counter(
            prompts[index] for picked in step_picks for index in picked.prompts for _ in range(G)
        )
        assert all(index not in picked.prompts for picked in step_picks for index in picked.skipped)


def test_dr_grpo_trains_on_vllm_completions(shared_engine, vllm_policy, tmp_path):
    task, folder = vllm_policy
    config = vllm_config(DrGRPOConfig, tmp_path, max_steps=2)
    trainer = vllm_trainer(DrGRPOTrainer, config, task, folder)
    recorder = VLLMRecorder(trainer)
    trainer.train()
    assert trainer.state.global_step == 2
    assert [sync["step"] for sync in recorder.syncs] == [0, 1]
    assert all(sync["weight_error"] <= 1.0 for sync in recorder.syncs)
    sampled = recorder.sampled()
    for step, inputs in enumerate(recorder.loss_inputs):
        # One vLLM call per step, and the loss trains on exactly what it returned, with its sampling log-probs.
        assert len(recorder.train_calls(step)) == 1 and len(recorder.train_calls(step)[0].prompt_ids) == ROWS
        for prompt, completion, i in loss_rows(inputs):
            logprobs = sampled[(tuple(prompt), tuple(completion))]
            sampling = inputs["sampling_per_token_logps"][i, : len(completion)]
            assert any(torch.equal(sampling, torch.tensor(lp)) for lp in logprobs)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def test_evaluation_generates_every_eval_prompt_with_vllm_unfiltered(shared_engine, vllm_policy, tmp_path):
    task, folder = vllm_policy
    reward = HalfDegenerateReward(G)
    config = vllm_config(DAPOConfig, tmp_path, max_steps=1, per_device_eval_batch_size=ROWS)
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[reward], eval_dataset=task.eval_dataset)
    recorder = VLLMRecorder(trainer)
    trainer.train()
    metrics = trainer.evaluate()
    eval_calls = [call for call in recorder.generate_calls if not call.training]
    # Every eval prompt once per generation, degenerate groups included: evaluation is never filtered or refilled.
    assert decoded_prompts(trainer, eval_calls) == Counter(p for p in task.eval_dataset["prompt"] for _ in range(G))
    assert len(eval_calls) == -(-len(task.eval_dataset) * G // ROWS)
    assert 0 < metrics["eval_frac_reward_zero_std"] < 1
    assert not any(key.startswith("eval_dynamic_sampling") for key in metrics)
    assert "eval_sampling/importance_sampling_ratio/mean" in metrics
    # Evaluation after the step synced the trained weights into vLLM first.
    assert [sync["step"] for sync in recorder.syncs] == [0, 1] and recorder.syncs[-1]["weight_error"] <= 1.0


def test_resume_under_vllm_syncs_the_checkpoint_and_continues_identically(shared_engine, vllm_policy, tmp_path):
    """With a reward keyed on the prompt, which groups are informative does not depend on the sampled completions,
    so a resumed run must ask vLLM for exactly the prompts the uninterrupted run asked for."""
    task, folder = vllm_policy

    def run(output_dir, resume_from=None):
        config = vllm_config(DAPOConfig, output_dir, max_steps=4, save_strategy="steps", save_steps=2)
        trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
        recorder = VLLMRecorder(trainer)
        first_sync = []
        sync_weights = trainer.vllm_generation.sync_weights

        def sync_and_compare_with_checkpoint():
            sync_weights()
            if resume_from and not first_sync:
                saved = AutoModelForCausalLM.from_pretrained(resume_from)
                first_sync.append(engine_weight_error(trainer, saved))

        trainer.vllm_generation.sync_weights = sync_and_compare_with_checkpoint
        trainer.train(resume_from_checkpoint=resume_from)
        return trainer, recorder, first_sync

    first, first_recorder, _ = run(tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoint-2"
    resumed, resumed_recorder, first_sync = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert resumed.state.global_step == 4
    # The resumed run's first sync loads the checkpoint's weights into vLLM, at the step it resumes from.
    assert resumed_recorder.syncs[0]["step"] == 2 and first_sync[0] <= 1.0
    assert [sync["step"] for sync in resumed_recorder.syncs] == [2, 3]
    state = json.loads((checkpoint / "dynamic_sampling_state.json").read_text())
    assert state["refill_sampler"] is not None
    for step in (2, 3):
        assert decoded_prompts(resumed, resumed_recorder.train_calls(step)) == decoded_prompts(
            first, first_recorder.train_calls(step)
        )
    keys = ["dynamic_sampling/rounds", "dynamic_sampling/generated_groups", "dynamic_sampling/pass_rate"]
    assert [[entry[key] for key in keys] for entry in dynamic_sampling_logs(resumed)[2:]] == [
        [entry[key] for key in keys] for entry in dynamic_sampling_logs(first)[2:]
    ]
