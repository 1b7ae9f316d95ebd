"""`DAPOTrainer`'s dynamic sampling generating with real vLLM (colocate mode).

One run on the toy task with a prompt-controlled reward (groups of even-operand prompts are informative, the others
degenerate) is recorded at the vLLM boundary, and each test checks one promise against it: no degenerate group is
trained, each round is one vLLM `generate` call, weights go into vLLM once per optimizer step, and vLLM's own
sampling log-probs feed TRL's importance-sampling correction and its `sampling/*` metrics for the trained batch.
"""

import copy
import dataclasses
from collections import defaultdict

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer

from ..dynamic_sampling.scripts.rewards import HalfDegenerateReward, is_live_prompt
from ..helpers import DAPO_AS_PUBLISHED
from .helpers import VLLMRecorder, completion_logps, loss_rows, vllm_config, vllm_trainer

pytestmark = pytest.mark.vllm

G = 4
STEPS = 4
BATCH_GROUPS = 4  # 16 rows per step
CLIP_MAX = 3.0  # TRL's default vllm_importance_sampling_clip_max
ATOL = 1e-5


@dataclasses.dataclass
class Run:
    trainer: DAPOTrainer
    recorder: VLLMRecorder
    reward: HalfDegenerateReward
    policies: list  # the policy at the start of each step (the one vLLM sampled from)
    logs: list[dict]


@pytest.fixture(scope="module")
def run(shared_engine, vllm_policy, tmp_path_factory):
    task, folder = vllm_policy
    reward = HalfDegenerateReward(G)
    # DAPO as published: every trained row is this step's, so its old log-probs are this step's policy's (carried
    # rows under vLLM: tests/vllm/test_carry.py).
    config = vllm_config(
        DAPOConfig, tmp_path_factory.mktemp("ds"), max_steps=STEPS, vllm_importance_sampling_mode="token_truncate",
        **DAPO_AS_PUBLISHED,
    )  # fmt: skip
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[reward])
    recorder = VLLMRecorder(trainer)
    policies = []
    sample = trainer.dynamic_sampler.sample_batch

    def recording_sample(inputs, trl_generate_and_score):
        policy = copy.deepcopy(task.model)
        policy.load_state_dict(trainer.model.state_dict())
        policies.append(policy)
        return sample(inputs, trl_generate_and_score)

    trainer.dynamic_sampler.sample_batch = recording_sample
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    return Run(trainer, recorder, reward, policies, logs)


def test_every_completion_is_generated_by_vllm_and_no_degenerate_group_is_trained(run):
    tokenizer = run.trainer.processing_class
    assert run.trainer.state.global_step == STEPS and len(run.logs) == STEPS
    sampled = run.recorder.sampled()
    for inputs in run.recorder.loss_inputs:
        rows = list(loss_rows(inputs))
        assert len(rows) == BATCH_GROUPS * G
        # TRL shuffles the rows of a generation batch before the loss, so groups are gathered back by prompt.
        advantages = defaultdict(list)
        for prompt, completion, i in rows:
            assert (tuple(prompt), tuple(completion)) in sampled, "a trained completion vLLM never generated"
            advantages[tokenizer.decode(prompt, skip_special_tokens=True)].append(float(inputs["advantages"][i]))
        for prompt, values in advantages.items():
            # Only prompts whose groups are informative by construction are trained, and each group has signal.
            assert is_live_prompt(prompt), prompt
            assert len(values) % G == 0 and any(value != 0 for value in values)
    # Degenerate groups were generated (and dropped): the filter had something to do.
    assert sum(entry["dynamic_sampling/all_wrong_frac"] for entry in run.logs) > 0


def test_each_round_is_one_vllm_generate_call(run):
    rounds = [int(entry["dynamic_sampling/rounds"]) for entry in run.logs]
    assert max(rounds) > 1, "the run must need refill rounds to test them"
    for step, entry in enumerate(run.logs):
        calls = run.recorder.train_calls(step)
        assert len(calls) == rounds[step]
        # The calls cover every generated group: the dataloader's and the refills, each prompt G times.
        assert sum(len(call.prompt_ids) for call in calls) == entry["dynamic_sampling/generated_groups"] * G
        tokens = sum(len(ids) for call in calls for ids in call.completion_ids)
        assert tokens == entry["dynamic_sampling/generated_tokens"]
    # Phase 2 replays the kept completions: no extra vLLM call, so every call belongs to a round.
    assert len(run.recorder.generate_calls) == sum(rounds)


def test_weights_are_synced_into_vllm_once_per_optimizer_step(run):
    assert [sync["step"] for sync in run.recorder.syncs] == list(range(STEPS))
    # After each sync the engine holds the trainer's weights, up to vLLM's bfloat16 rounding.
    assert all(sync["weight_error"] <= 1.0 for sync in run.recorder.syncs), run.recorder.syncs


def test_vllm_sampling_logprobs_reach_the_importance_sampling_correction(run):
    sampled = run.recorder.sampled()
    checked = 0
    for inputs in run.recorder.loss_inputs:
        policy = run.policies[inputs["step"]]
        for prompt, completion, i in loss_rows(inputs):
            n = len(completion)
            sampling = inputs["sampling_per_token_logps"][i, :n]
            # The log-probs vLLM returned when it sampled this completion, passed through unchanged.
            assert any(torch.equal(sampling, torch.tensor(lp)) for lp in sampled[(tuple(prompt), tuple(completion))])
            old = inputs["old_per_token_logps"][i, :n]
            torch.testing.assert_close(old, completion_logps(policy, prompt, completion), atol=ATOL, rtol=0)
            ratio = inputs["importance_sampling_ratio"][i, :n]
            torch.testing.assert_close(ratio, torch.exp(old - sampling).clamp(max=CLIP_MAX), atol=ATOL, rtol=ATOL)
            checked += 1
    assert checked == STEPS * BATCH_GROUPS * G
    # vLLM samples in bfloat16, so its log-probs differ from the trained model's: the correction is not a no-op.
    differences = [entry["sampling/sampling_logp_difference/max"] for entry in run.logs]
    assert max(differences) > 0


def test_sampling_metrics_describe_the_trained_batch_only(run):
    for inputs, entry in zip(run.recorder.loss_inputs, run.logs, strict=True):
        mask = inputs["completion_mask"].bool()
        delta = (inputs["old_per_token_logps"] - inputs["sampling_per_token_logps"]).abs()[mask]
        ratio = inputs["importance_sampling_ratio"][mask]
        expected = {
            "sampling/sampling_logp_difference/mean": delta.mean(),
            "sampling/sampling_logp_difference/max": delta.max(),
            "sampling/importance_sampling_ratio/min": ratio.min(),
            "sampling/importance_sampling_ratio/mean": ratio.mean(),
            "sampling/importance_sampling_ratio/max": ratio.max(),
        }
        for key, value in expected.items():
            assert entry[key] == pytest.approx(float(value), rel=1e-5, abs=1e-7), key
        # TRL's completion metrics, too, describe the trained batch, not every generated round.
        lengths = inputs["completion_mask"].sum(1).float()
        assert entry["completions/mean_length"] == pytest.approx(float(lengths.mean()))


@pytest.fixture(scope="module")
def drop_run(shared_engine, vllm_policy, tmp_path_factory):
    task, folder = vllm_policy
    config = vllm_config(DAPOConfig, tmp_path_factory.mktemp("drop"), max_steps=2, dynamic_sampling="drop",
                         vllm_importance_sampling_mode="token_truncate")  # fmt: skip
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
    recorder = VLLMRecorder(trainer)
    trainer.train()
    return trainer, recorder


def test_drop_generates_one_vllm_call_per_step_and_masks_the_flat_groups(drop_run):
    """`dynamic_sampling="drop"` under vLLM: `GRPOTrainer`'s one call of one generation batch per step, and only the
    rows of informative groups in the loss, with vLLM's importance-sampling correction as TRL computes it."""
    trainer, recorder = drop_run
    tokenizer = trainer.processing_class
    for step in range(2):
        (call,) = recorder.train_calls(step)
        assert len(call.prompt_ids) == BATCH_GROUPS * G
    live_rows = 0
    for inputs in recorder.loss_inputs:
        assert "importance_sampling_ratio" in inputs
        for i in range(inputs["prompt_ids"].shape[0]):
            prompt = tokenizer.decode(inputs["prompt_ids"][i][inputs["prompt_mask"][i].bool()], skip_special_tokens=True)
            kept = bool(inputs["completion_mask"][i].sum() > 0)
            assert kept == is_live_prompt(prompt), prompt
            live_rows += kept
    logged = [entry["dynamic_sampling/kept_rows_frac"] for entry in trainer.state.log_history
              if "dynamic_sampling/kept_rows_frac" in entry]  # fmt: skip
    assert len(logged) == 2 and live_rows == round(sum(logged) * BATCH_GROUPS * G)
