"""Prompt skipping at trainer level: real `DAPOTrainer` runs on the toy task with prompt-controlled rewards.

`HalfDegenerateReward` makes the groups of prompts with an odd first operand degenerate (all 0: all wrong) every
time, and the others informative every time, so the history each row must hold can be recomputed from the
reward's own record of what it scored. The trainer's `_pick` is wrapped to record each skip decision with the
history it was taken on.
"""

import copy
import dataclasses
import json
from unittest.mock import patch

import numpy as np
import pytest
import torch
from trl import GRPOTrainer

import trl_variants.experimental.prompt_skipping.skipper as skipping_glue
from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.experimental.prompt_skipping.streak import ALL_WRONG, INFORMATIVE
from trl_variants.experimental.prompt_skipping.skipper import HISTORY_FILE
from trl_variants.dynamic_sampling.checkpoint import MANIFEST_FILE, STATE_FILE
from trl_variants.reliability.checkpoints import checkpoint_problems
from trl_variants.toy import make_toy_task

from ..helpers import toy_config, toy_trainer
from .scripts.rewards import (
    ConstantReward,
    HalfDegenerateReward,
    generated_groups,
    is_live_prompt,
)

G = 4
BATCH_GROUPS = 16 // G  # toy_config: 16 rows per device


@pytest.fixture(scope="module")
def shared_task():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # The rewards here are keyed on the prompt, so the policy's skill is irrelevant: a short warm start saves time.
    yield make_toy_task(seed=0, warm_start_steps=10)
    torch.set_num_threads(threads)


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


# What TRL passes every reward function besides the dataset's columns.
TRL_REWARD_KWARGS = {"trainer_state", "log_extra", "log_metric"}


class IndexBlindReward(HalfDegenerateReward):
    """`HalfDegenerateReward` that also fails if a reward function ever gets a column the toy dataset lacks."""

    def __call__(self, prompts, completions, completion_ids, trainer_state, **kwargs):
        extra = set(kwargs) - {"answer"} - TRL_REWARD_KWARGS
        assert not extra, f"reward functions must get the dataset's columns only, got {extra}"
        return super().__call__(prompts, completions, completion_ids, trainer_state, **kwargs)


def recording_picks(trainer) -> list[dict]:
    picks = []
    skipper = trainer.dynamic_sampler.skipper
    pick = skipper.pick

    def recording_pick(first, needed, step):
        streak = skipper.history.streak.copy()
        picked = pick(first, needed, step)
        picks.append({"step": trainer.state.global_step, "first": list(first), "streak": streak, "picked": picked})
        return picked

    skipper.pick = recording_pick
    return picks


def skip_config(output_dir, **overrides):
    # The streak predictor; a step of 0.5 takes p to its floor within two steps, so that skipping shows within a
    # short run. Without carrying, so that every generated group is this step's.
    settings = dict(skip_degenerate_prompts=True, dynamic_sampling_carry_surplus=False, skip_predictor="streak",
                    skip_probability_step=0.5)  # fmt: skip
    return toy_config(DAPOConfig, output_dir, **{**settings, **overrides})


def expected_history(task, reward) -> tuple[np.ndarray, np.ndarray]:
    """The history recomputed from what the reward scored: odd prompts lengthen their streak, even ones end it."""
    row_of = {prompt: i for i, prompt in enumerate(task.train_dataset["prompt"])}
    streak = np.zeros(len(row_of), dtype=np.uint8)
    kind = np.zeros(len(row_of), dtype=np.int8)
    for group in generated_groups(reward.calls, G):
        row = row_of[group["prompt"]]
        if is_live_prompt(group["prompt"]):
            streak[row], kind[row] = 0, INFORMATIVE
        else:
            streak[row], kind[row] = streak[row] + 1, ALL_WRONG
    return streak, kind


def test_prompts_degenerate_on_earlier_visits_are_skipped_before_generation(task, tmp_path):
    reward = IndexBlindReward(G)
    trainer = toy_trainer(DAPOTrainer, skip_config(tmp_path, max_steps=8), task, reward_funcs=[reward])
    picks = recording_picks(trainer)
    trainer.train()
    assert trainer.state.global_step == 8

    # The history is exactly what the generated groups say, on the same metric that decided degeneracy.
    streak, kind = expected_history(task, reward)
    assert trainer.dynamic_sampler.skipper.history.streak.tolist() == streak.tolist()
    assert trainer.dynamic_sampler.skipper.history.kind.tolist() == kind.tolist()
    assert streak.max() >= 2, "the run must revisit degenerate prompts"

    # Only prompts with a degenerate streak are ever skipped, from the dataloader's batch and from refills alike.
    prompts = task.train_dataset["prompt"]
    skipped_from_batch = skipped_from_refills = 0
    for pick in picks:
        for index in pick["picked"].skipped:
            assert pick["streak"][index] >= 1 and not is_live_prompt(prompts[index])
        skipped_from_batch += len(pick["picked"].skipped) if pick["first"] else 0
        skipped_from_refills += 0 if pick["first"] else len(pick["picked"].skipped)
        assert len(pick["picked"].prompts) == (len(pick["first"]) or len(pick["picked"].prompts))
    assert skipped_from_batch > 0 and skipped_from_refills > 0

    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/skipped_prompts" in entry]
    assert len(logs) == 8
    assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in logs) == sum(
        len(pick["picked"].skipped) for pick in picks
    )
    # Odd prompts are never informative, so an explored candidate (if any) never turns out informative here.
    key = "dynamic_sampling/skip_candidates_informative_frac"
    assert all(entry[key] == 0.0 for entry in logs if key in entry)
    # p follows the rule: down by the step while the kind's share exceeds half the target, up while below.
    p_easy = p_hard = 0.5
    for entry in logs:
        share_easy, share_hard = entry["dynamic_sampling/all_correct_frac"], entry["dynamic_sampling/all_wrong_frac"]
        p_easy = min(1.0, max(0.01, p_easy + (0.5 if share_easy < 0.125 else -0.5 if share_easy > 0.125 else 0)))
        p_hard = min(1.0, max(0.01, p_hard + (0.5 if share_hard < 0.125 else -0.5 if share_hard > 0.125 else 0)))
        assert entry["dynamic_sampling/explore_probability_easy"] == pytest.approx(p_easy)
        assert entry["dynamic_sampling/explore_probability_hard"] == pytest.approx(p_hard)
    assert p_hard == 0.01 and p_easy == 1.0
    # Skipping paid off: the last steps generated fewer degenerate groups than the first.
    assert logs[-1]["dynamic_sampling/all_wrong_frac"] < logs[0]["dynamic_sampling/all_wrong_frac"]


class RecoveringReward(HalfDegenerateReward):
    """Odd prompts are all wrong before `RECOVERY_STEP` and informative from then on, as if the policy had
    learned them: the prompts skipping has written off must be found again."""

    __name__ = "recovering_reward"
    RECOVERY_STEP = 3

    def __call__(self, prompts, completions, completion_ids, trainer_state, **kwargs):
        self.recovered = trainer_state.global_step >= self.RECOVERY_STEP
        return super().__call__(prompts, completions, completion_ids, trainer_state, **kwargs)

    def score(self, index, prompt, completion_ids):
        return float(index % self.num_generations) if self.recovered or is_live_prompt(prompt) else 0.0


@pytest.mark.slow
def test_skipped_prompts_that_became_informative_are_found_again(task, tmp_path):
    reward = RecoveringReward(G)
    config = skip_config(tmp_path, max_steps=7, skip_min_explore_probability=0.3)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward])
    picks = recording_picks(trainer)
    trainer.train()
    key = "dynamic_sampling/skip_candidates_informative_frac"
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/skipped_prompts" in entry]
    before = [entry.get(key) for entry in logs[: RecoveringReward.RECOVERY_STEP]]
    after = [entry.get(key) for entry in logs[RecoveringReward.RECOVERY_STEP :]]
    assert all(value in (None, 0.0) for value in before)
    # Once the odd prompts recovered, every explored candidate was informative; and some were explored.
    assert any(value is not None for value in after) and all(value in (None, 1.0) for value in after)
    explored_after = [
        index
        for pick in picks
        if pick["step"] >= RecoveringReward.RECOVERY_STEP
        for index, candidate in zip(pick["picked"].prompts, pick["picked"].candidates, strict=True)
        if candidate
    ]
    assert explored_after, "candidates must have been explored after the recovery"
    # Their streaks ended when they were found informative.
    assert all(trainer.dynamic_sampler.skipper.history.streak[index] == 0 for index in explored_after)


@pytest.mark.slow
def test_all_degenerate_dataset_still_trains_with_one_warning(task, tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(skipping_glue.logger, "warning", lambda message: warnings.append(message))
    config = skip_config(tmp_path, max_steps=4, dynamic_sampling_max_rounds=2)
    trainer = toy_trainer(DAPOTrainer, config, task, train_dataset=task.train_dataset.select(range(8)),
                          reward_funcs=[ConstantReward()])  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 4
    assert len(warnings) == 1 and "predicts them degenerate" in warnings[0]
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/skipped_prompts" in entry]
    assert all(entry["dynamic_sampling/kept_groups"] == 0 for entry in logs)
    assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in logs) > 0
    assert trainer.dynamic_sampler.skipper.history.streak.min() >= 1


def test_skipping_off_leaves_the_dataloader_rows_unmarked(task, tmp_path):
    reward = IndexBlindReward(G)
    trainer = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path, max_steps=1, skip_degenerate_prompts=False), task, reward_funcs=[reward])
    trainer.train()
    assert trainer.dynamic_sampler.skipper is None
    assert not any("dynamic_sampling/skipped_prompts" in entry for entry in trainer.state.log_history)


@pytest.mark.slow
def test_resume_restores_the_history_and_continues_identically(shared_task, tmp_path):
    def run(output_dir, resume_from=None):
        task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
        config = skip_config(output_dir, max_steps=4, save_strategy="steps", save_steps=2)
        trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
        loaded = []
        skipper = trainer.dynamic_sampler.skipper
        load = skipper.load

        def recording_load(state, checkpoint_dir):
            load(state, checkpoint_dir)
            loaded.append(skipper.history.streak.copy())

        skipper.load = recording_load
        trainer.train(resume_from_checkpoint=resume_from)
        return trainer, loaded

    first, _ = run(tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoint-2"
    state = json.loads((checkpoint / STATE_FILE).read_text())
    assert state["skipping"]["history_file"] == HISTORY_FILE
    with np.load(checkpoint / HISTORY_FILE) as arrays:
        saved_streak = arrays["streak"].copy()
    assert saved_streak.max() >= 1

    resumed, loaded = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert resumed.state.global_step == 4
    assert len(loaded) == 1 and loaded[0].tolist() == saved_streak.tolist()
    # Same history, same p and the same decision stream as the run that was never interrupted.
    assert resumed.dynamic_sampler.skipper.history.streak.tolist() == first.dynamic_sampler.skipper.history.streak.tolist()
    assert resumed.dynamic_sampler.skipper.history.kind.tolist() == first.dynamic_sampler.skipper.history.kind.tolist()
    assert resumed.dynamic_sampler.skipper.explore_p == first.dynamic_sampler.skipper.explore_p and resumed.dynamic_sampler.skipper.draws == first.dynamic_sampler.skipper.draws

    # A checkpoint of a skipping run without its history file is incomplete, so a resume never picks it.
    assert checkpoint_problems(str(checkpoint)) == []
    (checkpoint / HISTORY_FILE).unlink()
    assert checkpoint_problems(str(checkpoint)) == [f"{HISTORY_FILE} is missing although {MANIFEST_FILE} lists it"]
    # Written before manifests existed, it is found incomplete by the metrics its run logged.
    (checkpoint / MANIFEST_FILE).unlink()
    assert checkpoint_problems(str(checkpoint)) == [
        f"{HISTORY_FILE} is missing although the run skipped degenerate prompts"
    ]


@pytest.mark.parametrize("remove_unused_columns", [False, True])
def test_every_dataloader_row_is_paired_with_its_dataset_index(task, tmp_path, remove_unused_columns):
    """The index reaches the skip hook whether or not transformers removes unused columns, is the row's own, and
    travels beside the rows: they hold the dataset's columns and nothing else."""
    config = skip_config(tmp_path, max_steps=1, remove_unused_columns=remove_unused_columns)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[IndexBlindReward(G)])
    seen, first_seen = [], []
    sampler = trainer.dynamic_sampler
    first_segment = sampler.first_segment
    skip_hook = sampler.skipper.replace

    def recording_first_segment(inputs):
        seen.extend((sampler.indices.key(row), row) for row in inputs)
        return first_segment(inputs)

    def recording_skip_hook(first, step):
        first_seen.extend(first)
        return skip_hook(first, step)

    sampler.first_segment = recording_first_segment
    sampler.skipper.replace = recording_skip_hook
    trainer.train()
    assert len(seen) == 16
    # The hook gets each group's index, the first row's.
    assert first_seen == [index for index, _ in seen[::G]]
    columns = ["prompt"] if remove_unused_columns else task.train_dataset.column_names
    for index, row in seen:
        assert row == {column: task.train_dataset[index][column] for column in columns}


def test_prepare_inputs_gets_the_dataset_rows_as_they_are_with_skipping_on(task, tmp_path):
    """TRL's own `test_prepare_input_called_with_correct_data`, with the class swapped and prompt skipping on: each
    generation batch reaches `training_step` (and so `_prepare_inputs`) as the dataset's rows, in sampler order,
    repeated `steps_per_generation * num_iterations` times."""
    config = toy_config(
        DAPOConfig, tmp_path, skip_degenerate_prompts=True, per_device_train_batch_size=8, steps_per_generation=2,
        num_iterations=2, gradient_accumulation_steps=4, shuffle_dataset=False, max_steps=2,
    )  # fmt: skip
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    assert trainer.dynamic_sampler.skipper is not None
    rows = [dict(row) for row in task.train_dataset]
    # 16 rows per generation batch: 4 prompts of the unshuffled dataset, each G times.
    first_batch = [row for row in rows[0:4] for _ in range(G)]
    second_batch = [row for row in rows[4:8] for _ in range(G)]
    with patch.object(GRPOTrainer, "training_step", wraps=trainer.training_step) as training_step:
        trainer.train()
    assert training_step.call_count == 8
    for call in training_step.call_args_list[:4]:
        assert call.args[1] == first_batch
    for call in training_step.call_args_list[4:]:
        assert call.args[1] == second_batch
