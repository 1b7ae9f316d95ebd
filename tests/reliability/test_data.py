"""Bad datasets fail at construction with a clear error; a dataset smaller than one batch is cycled."""

import functools
from collections import Counter

import pytest
from trl.trainer.utils import RepeatSampler

from trl_variants import (
    DAPOConfig,
    DAPOTrainer,
    DrGRPOConfig,
    DrGRPOTrainer,
    dapo_accuracy_reward,
)
from trl_variants.reliability.data_checks import (
    CyclingRepeatSampler,
    ResumableRepeatSampler,
    required_reward_columns,
)
from trl_variants.toy import toy_accuracy_reward

from ..helpers import toy_config, toy_trainer

TRAINERS = [(DAPOTrainer, DAPOConfig), (DrGRPOTrainer, DrGRPOConfig)]


@pytest.fixture
def task(toy_task):
    return toy_task


def build(trainer_class, config_class, task, tmp_path, **kwargs):
    return toy_trainer(trainer_class, toy_config(config_class, tmp_path), task, **kwargs)


@pytest.mark.parametrize("trainer_class, config_class", TRAINERS)
def test_dataset_without_prompt_column_is_refused(task, tmp_path, trainer_class, config_class):
    dataset = task.train_dataset.rename_column("prompt", "question")
    expected = r"train_dataset has no 'prompt' column \(its columns are \['answer', 'question'\]\)"
    with pytest.raises(ValueError, match=expected):
        build(trainer_class, config_class, task, tmp_path, train_dataset=dataset)


@pytest.mark.parametrize("trainer_class, config_class", TRAINERS)
def test_empty_dataset_is_refused(task, tmp_path, trainer_class, config_class):
    with pytest.raises(ValueError, match=r"train_dataset is empty \(0 rows\)"):
        build(trainer_class, config_class, task, tmp_path, train_dataset=task.train_dataset.select([]))


def test_missing_reward_column_is_refused_naming_function_and_column(task, tmp_path):
    dataset = task.train_dataset.rename_column("answer", "solution_text")
    with pytest.raises(ValueError) as raised:
        build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, train_dataset=dataset)
    assert str(raised.value) == (
        "Reward function 'toy_accuracy_reward' needs the column(s) ['answer'], which train_dataset lacks (its columns "
        "are ['prompt', 'solution_text']). Add the column(s) to the dataset, or give the parameter(s) a default in the "
        "reward function."
    )


def test_eval_dataset_is_checked_and_all_problems_are_listed(task, tmp_path):
    eval_dataset = task.eval_dataset.rename_column("prompt", "text").remove_columns("answer")
    with pytest.raises(ValueError) as raised:
        build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, eval_dataset={"held_out": eval_dataset})
    lines = str(raised.value).splitlines()
    assert lines[0] == "The datasets cannot be trained on:"
    assert lines[1].startswith("- eval_dataset['held_out'] has no 'prompt' column")
    assert lines[2].startswith("- Reward function 'toy_accuracy_reward' needs the column(s) ['answer']")


def test_optional_reward_parameters_do_not_require_columns(task, tmp_path):
    # dapo_accuracy_reward reads `solution` or, failing that, `answer`; neither parameter is required.
    trainer = build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, reward_funcs=[dapo_accuracy_reward])
    trainer.train()
    assert trainer.state.global_step == 2


def test_reward_columns_are_not_required_when_a_rollout_function_may_supply_them(task, tmp_path):
    def rollout(prompts, trainer):
        raise AssertionError("a rollout function is not called at construction")

    def judged_reward(completions, verdict, **kwargs):  # `verdict` would come from the rollout's extra fields
        return [1.0 if value == "ok" else 0.0 for value in verdict]

    trainer = build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, reward_funcs=[judged_reward], rollout_func=rollout)
    assert trainer.rollout_func is rollout
    with pytest.raises(ValueError, match=r"Reward function 'judged_reward' needs the column\(s\) \['verdict'\]"):
        build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, reward_funcs=[judged_reward])


class ColumnReward:
    def __call__(self, completions, level, *args, hint=None, **kwargs):
        return [0.0] * len(completions)


def test_required_reward_columns_reads_signatures():
    assert required_reward_columns(toy_accuracy_reward) == ["answer"]
    assert required_reward_columns(dapo_accuracy_reward) == []
    assert required_reward_columns(functools.partial(toy_accuracy_reward, answer=["1"])) == []
    assert required_reward_columns(ColumnReward()) == ["level"]

    def keyword_only(
        prompts, completions, completion_ids, *, difficulty, trainer_state, log_extra, log_metric, environments
    ):
        return []

    assert required_reward_columns(keyword_only) == ["difficulty"]
    assert required_reward_columns(len) == []  # a builtin without a Python signature is not checked



def test_trl_sampler_drops_a_dataset_smaller_than_a_batch_and_the_cycling_sampler_fills_it():
    small = list(range(3))
    assert list(RepeatSampler(small, mini_repeat_count=4, batch_size=8, seed=0)) == []
    sampler = CyclingRepeatSampler(small, mini_repeat_count=4, batch_size=8, repeat_count=2, seed=0)
    epochs = [list(sampler) for _ in range(3)]
    assert all(len(epoch) == len(sampler) == 8 * 4 * 2 for epoch in epochs)
    for epoch in epochs:
        rows = epoch[: 8 * 4]
        assert epoch[8 * 4 :] == rows  # repeat_count reuses the same batch
        groups = [rows[start : start + 4] for start in range(0, len(rows), 4)]
        assert all(len(set(group)) == 1 for group in groups)  # each prompt is one contiguous group
        counts = Counter(group[0] for group in groups)
        assert set(counts) == set(small) and set(counts.values()) <= {2, 3}
    assert len({tuple(epoch) for epoch in epochs}) > 1  # each epoch draws a new order
    again = CyclingRepeatSampler(small, mini_repeat_count=4, batch_size=8, repeat_count=2, seed=0)
    assert list(again) == epochs[0]  # same seed, same order on every process


@pytest.mark.parametrize(
    "trainer_class, config_class, overrides",
    [
        (DrGRPOTrainer, DrGRPOConfig, {}),
        (DAPOTrainer, DAPOConfig, {"dynamic_sampling": False}),
        (DAPOTrainer, DAPOConfig, {"dynamic_sampling": True}),
    ],
)
def test_small_dataset_is_cycled_and_trains(task, tmp_path, trainer_class, config_class, overrides):
    seen = []

    def recording_reward(prompts, completions, answer, **kwargs):
        seen.append(Counter(prompts))
        return toy_accuracy_reward(completions, answer)

    small = task.train_dataset.select(range(3))
    config = toy_config(config_class, tmp_path, **overrides)
    trainer = toy_trainer(trainer_class, config, task, train_dataset=small, reward_funcs=[recording_reward])
    trainer.train()
    assert trainer.state.global_step == 2
    assert len([entry for entry in trainer.state.log_history if "loss" in entry]) == 2
    # Every generation batch holds each of the 3 prompts (dynamic-sampling refill rounds draw their own prompts).
    batches_from_dataloader = seen[:1] if overrides.get("dynamic_sampling") else seen
    assert len(seen) >= 2 and all(set(counts) == set(small["prompt"]) for counts in batches_from_dataloader)


def test_train_sampler_keeps_trls_order_and_resumes_it_in_any_epoch(task, tmp_path):
    trainer = build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path)
    assert type(trainer._get_train_sampler()) is ResumableRepeatSampler
    small = task.train_dataset.select(range(3))
    small_trainer = build(DrGRPOTrainer, DrGRPOConfig, task, tmp_path, train_dataset=small)
    assert type(small_trainer._get_train_sampler()) is CyclingRepeatSampler

    settings = dict(mini_repeat_count=2, batch_size=3, repeat_count=2, seed=7)
    trl_sampler = RepeatSampler(list(range(10)), **settings)
    trl_epochs = [list(trl_sampler) for _ in range(3)]
    assert len({tuple(epoch) for epoch in trl_epochs}) == 3

    uninterrupted = ResumableRepeatSampler(list(range(10)), **settings)
    epochs = []
    for epoch in range(3):
        uninterrupted.set_epoch(epoch)  # the Trainer calls it before each epoch, sometimes twice
        uninterrupted.set_epoch(epoch)
        epochs.append(list(uninterrupted))
    assert epochs == trl_epochs
    resumed = ResumableRepeatSampler(list(range(10)), **settings)
    resumed.set_epoch(2)
    assert list(resumed) == trl_epochs[2]


@pytest.mark.parametrize(
    "prompts, expected",
    [
        ([1, 2], "train_dataset column 'prompt' holds values of type int64; expected text (str) or a conversation"),
        (
            [["1+1=", "2+2="]],
            "train_dataset column 'prompt' holds a list in its first row (['1+1=', '2+2=']); expected",
        ),
        ([[{"text": "1+1="}]], "train_dataset column 'prompt' holds a list in its first row ([{'text': '1+1='}]);"),
    ],
)
def test_prompt_column_of_the_wrong_type_is_refused_naming_column_and_types(task, tmp_path, prompts, expected):
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": prompts, "answer": ["2"] * len(prompts)})
    with pytest.raises(ValueError) as raised:
        build(DAPOTrainer, DAPOConfig, task, tmp_path, train_dataset=dataset)
    assert str(raised.value).startswith(expected), str(raised.value)
    assert "a list of {'role': ..., 'content': ...} messages" in str(raised.value)


def test_conversational_prompts_are_accepted(task, tmp_path):
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "1+1="}]] * 2, "answer": ["2"] * 2})
    assert build(DAPOTrainer, DAPOConfig, task, tmp_path, train_dataset=dataset) is not None
