"""The allocation mode (`dynamic_sampling_allocation=True`) at trainer level: real `DAPOTrainer` runs on the toy task
with `PassRateReward` (per prompt, a pass rate of 0, 1 or 0.5), against the same run without allocation. The
decisions' maths is tested without a model in tests/experimental/test_allocation.py; here, what the sampler does
with them: groups of exactly G rows, balanced from every completion of their prompt, the posterior recording what
was scored, the completions spent, checkpoints and resume, and bad settings refused in one line."""

import copy
import dataclasses

import numpy as np
import pytest

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.experimental.allocation.allocator import POSTERIOR_FILE
from trl_variants.reliability.checkpoints import checkpoint_problems
from trl_variants.toy import make_toy_task

from ..helpers import toy_config, toy_trainer
from .scripts.rewards import PassRateReward, first_operand

G = 4
STEPS = 8


@pytest.fixture(scope="module")
def shared_task(one_torch_thread):
    # The reward is keyed on the prompt and a hash of each completion, so the policy's skill is irrelevant.
    return make_toy_task(seed=0, warm_start_steps=10)


def fresh(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


def sampling_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]


def recording_steps(trainer) -> list[dict]:
    """Wraps the allocator's `finish_step` to record, per step, each generated prompt's scores and its group."""
    steps = []
    allocator = trainer.dynamic_sampler.allocator
    finish_step = allocator.finish_step

    def recording_finish_step(step, completions):
        generated = sorted((c for c in allocator.candidates if c.rows), key=lambda candidate: candidate.first_row)
        prompts = [(c.key, list(c.scores), [id(row) for row in c.rows]) for c in generated]
        candidates = len(allocator.candidates)
        groups = finish_step(step, completions)
        steps.append({"prompts": prompts, "groups": groups, "candidates": candidates})
        return groups

    allocator.finish_step = recording_finish_step
    return steps


def test_allocation_trains_balanced_groups_of_g_and_spends_completions_where_groups_mix(shared_task, tmp_path):
    reward = PassRateReward()
    config = toy_config(DAPOConfig, tmp_path / "allocation", max_steps=STEPS, dynamic_sampling_allocation=True)
    trainer = toy_trainer(DAPOTrainer, config, fresh(shared_task), reward_funcs=[reward])
    steps = recording_steps(trainer)
    batches = []
    sample_batch = trainer.dynamic_sampler.sample_batch
    trainer.dynamic_sampler.sample_batch = lambda *args: batches.append(sample_batch(*args)) or batches[-1]
    trainer.train()
    assert trainer.state.global_step == STEPS and len(steps) == STEPS
    # The trained batch is the batch TRL expects: 16 rows a step, in groups of G rows of one prompt.
    for batch in batches:
        prompts = [row.row["prompt"] for row in batch.local]
        assert len(prompts) == 16 and all(len(set(prompts[i : i + G])) == 1 for i in range(0, 16, G))
    logs = sampling_logs(trainer)
    dataset_prompts = trainer.train_dataset["prompt"]

    for step, entry in zip(steps, logs, strict=True):
        assert len(step["groups"]) == len(step["prompts"]) == entry["dynamic_sampling/generated_groups"]
        for (key, scores, row_ids), group in zip(step["prompts"], step["groups"], strict=True):
            # Exactly G of the prompt's own completions: up to G // 2 right, the rest wrong, topped up from the
            # right side when too few are wrong.
            assert len(group) == G and len({id(row) for row in group}) == G
            assert {id(row) for row in group} <= set(row_ids)
            assert all(row.row["prompt"] == dataset_prompts[key] for row in group)
            right = sum(score > 0.5 for score in scores)
            wrong = len(scores) - right
            group_right = sum(row.rewards[0] > 0.5 for row in group)
            assert group_right == G - min(wrong, G - min(right, G // 2))
        completions = sum(len(scores) for _, scores, _ in step["prompts"])
        assert entry["dynamic_sampling/allocation_generated_completions"] == completions
        assert entry["dynamic_sampling/allocation_candidates"] == step["candidates"]
        assert entry["dynamic_sampling/allocation_generated_prompts"] == len(step["prompts"])
        assert entry["dynamic_sampling/allocation_continued_prompts"] == sum(
            len(scores) > G for _, scores, _ in step["prompts"]
        )
    # Every completion generated was scored once, and the token count covers all of them, not only the groups.
    assert reward.rows_scored == sum(entry["dynamic_sampling/allocation_generated_completions"] for entry in logs)
    scored_tokens = sum(len(ids) for call in reward.calls for ids in call["completion_ids"])
    assert sum(entry["dynamic_sampling/generated_tokens"] for entry in logs) == scored_tokens
    # Some prompt still all right or all wrong after G completions was given more; some candidates got none.
    assert sum(entry["dynamic_sampling/allocation_continued_prompts"] for entry in logs) > 0
    assert sum(entry["dynamic_sampling/allocation_candidates"] for entry in logs) > sum(
        entry["dynamic_sampling/allocation_generated_prompts"] for entry in logs
    )

    # The posterior holds, per prompt, what was scored: never-right prompts no right answer, always-right ones no
    # wrong answer, and every generated prompt some evidence.
    posterior = trainer.dynamic_sampler.allocator.posterior
    generated = {key for step in steps for key, _, _ in step["prompts"]}
    assert (posterior.updated[sorted(generated)] >= 0).all()
    assert ((posterior.right + posterior.wrong)[sorted(generated)] > 0).all()
    for key in generated:
        rate = PassRateReward.PASS_RATES[first_operand(dataset_prompts[key]) % 4]
        assert (posterior.right[key] == 0) if rate == 0 else (posterior.wrong[key] == 0) if rate == 1 else True

    default_reward = PassRateReward()
    default = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path / "default", max_steps=STEPS),
                          fresh(shared_task), reward_funcs=[default_reward])  # fmt: skip
    default.train()
    # Without allocation every generated prompt costs G completions; with it, the first step (no history) spends
    # alike, and the run as a whole spends differently.
    default_logs = sampling_logs(default)
    assert default_reward.rows_scored == G * sum(entry["dynamic_sampling/generated_groups"] for entry in default_logs)
    assert reward.rows_scored != default_reward.rows_scored


def test_resume_restores_the_posterior_and_logs_the_uninterrupted_run(shared_task, tmp_path):
    def run(output_dir, resume_from=None):
        config = toy_config(DAPOConfig, output_dir, max_steps=6, save_strategy="steps", save_steps=3,
                            dynamic_sampling_allocation=True)  # fmt: skip
        trainer = toy_trainer(DAPOTrainer, config, fresh(shared_task), reward_funcs=[PassRateReward()])
        trainer.train(resume_from_checkpoint=resume_from)
        return trainer

    first = run(tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoint-3"
    assert checkpoint_problems(str(checkpoint)) == []
    with np.load(checkpoint / POSTERIOR_FILE) as arrays:
        saved_updated = arrays["updated"].copy()
    assert saved_updated.max() == 2  # the posterior as it was after the checkpoint's last step (global step 2)

    resumed = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert resumed.state.global_step == 6
    uninterrupted, after_resume = sampling_logs(first)[3:], sampling_logs(resumed)[3:]
    assert len(after_resume) == 3
    for expected, entry in zip(uninterrupted, after_resume, strict=True):
        timed = {key for key in entry if "time" in key or "per_second" in key}
        assert {k: v for k, v in entry.items() if k not in timed} == {
            k: v for k, v in expected.items() if k not in timed
        }
    for name, array in first.dynamic_sampler.allocator.posterior.arrays().items():
        assert resumed.dynamic_sampler.allocator.posterior.arrays()[name].tolist() == array.tolist(), name

    # A checkpoint of an allocating run without its posterior is incomplete, so a resume never picks it.
    (checkpoint / POSTERIOR_FILE).unlink()
    assert checkpoint_problems(str(checkpoint)) == [
        f"{POSTERIOR_FILE} is missing although the run allocated completions"
    ]


@pytest.mark.parametrize("overrides", [{"skip_degenerate_prompts": True}, {"dynamic_sampling": False}])
def test_unsupported_settings_are_refused_in_one_line(tmp_path, overrides):
    with pytest.raises(ValueError) as error:
        toy_config(DAPOConfig, tmp_path, dynamic_sampling_allocation=True, **overrides)
    assert str(error.value) == (
        "dynamic_sampling_allocation=True is not allowed; expected False when dynamic_sampling=False or "
        "skip_degenerate_prompts=True (allocation chooses the prompts itself, within dynamic sampling's rounds)."
    )


def test_a_streaming_dataset_is_refused_in_one_line(shared_task, tmp_path):
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling_allocation=True)
    with pytest.raises(ValueError) as error:
        stream = shared_task.train_dataset.to_iterable_dataset()
        toy_trainer(DAPOTrainer, config, fresh(shared_task), train_dataset=stream)
    assert str(error.value) == (
        "dynamic_sampling_allocation=True is not allowed with a streaming train_dataset; expected a map-style dataset "
        "(the posterior is kept per dataset index), or dynamic_sampling_allocation=False."
    )
