"""Reward functions (DAPO accuracy, soft overlong punishment, toy accuracy) and how DAPOTrainer wires the
overlong punishment from its config."""

import pickle

import numpy as np
import pytest

import trl_variants.rewards.accuracy as accuracy_module
from trl_variants import (
    DAPOConfig,
    DAPOTrainer,
    dapo_accuracy_reward,
    soft_overlong_punishment,
)
from trl_variants.rewards import SoftOverlongPunishment
from trl_variants.toy import parse_answer, toy_accuracy_reward

from . import ref_formulas as ref
from .helpers import toy_config, toy_trainer
from .ref_setup import fresh_toy_task, record_scored_batches

# dapo_accuracy_reward


def test_dapo_accuracy_reward_is_plus_one_when_right_and_minus_one_otherwise():
    completions = ["Let me think.\nAnswer: 42", "Answer: 41", "The sum is \\boxed{42}.", "no answer line"]
    assert dapo_accuracy_reward(completions, solution=["42"] * 4) == [1.0, -1.0, 1.0, -1.0]


def test_dapo_accuracy_reward_uses_the_last_answer_line():
    assert dapo_accuracy_reward(["Answer: 3\nwait, no.\nAnswer: 4"], solution=["4"]) == [1.0]
    assert dapo_accuracy_reward(["Answer: 4\nwait, no.\nAnswer: 3"], solution=["4"]) == [-1.0]


def test_dapo_accuracy_reward_accepts_equivalent_forms_through_math_verify():
    import math_verify  # noqa: F401  (the `math` extra; without it these forms would not be recognised as equal)

    completions = ["Answer: 0.5", "\\boxed{\\frac{1}{2}}", "Answer: 1/2", "Answer: $\\frac{2}{4}$", "Answer: 0.25"]
    assert dapo_accuracy_reward(completions, solution=["\\frac{1}{2}"] * 5) == [1.0, 1.0, 1.0, 1.0, -1.0]


@pytest.mark.parametrize("gold", ["\\", ""])
def test_dapo_accuracy_reward_gives_none_for_a_gold_answer_math_verify_cannot_parse(gold):
    from math_verify import parse

    assert parse(f"${gold}$") == []  # really unparsable, not merely odd
    assert dapo_accuracy_reward(["Answer: 1", f"Answer: {gold}"], solution=[gold, gold]) == [None, None]


def test_dapo_accuracy_reward_reads_the_answer_column_and_conversational_completions():
    completions = [[{"role": "assistant", "content": "so\nAnswer: 12"}], [{"role": "assistant", "content": "13"}]]
    assert dapo_accuracy_reward(completions, answer=["12", "12"]) == [1.0, -1.0]


def test_dapo_accuracy_reward_names_the_missing_gold_column():
    with pytest.raises(ValueError, match=r"dapo_accuracy_reward.*'solution' or 'answer'.*\['question'\]"):
        dapo_accuracy_reward(["Answer: 1"], question=["1+0"])


def test_dapo_accuracy_reward_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="2 completions but 1 gold answers"):
        dapo_accuracy_reward(["Answer: 1", "Answer: 2"], solution=["1"])


def test_dapo_accuracy_reward_without_math_verify_compares_normalised_strings(monkeypatch):
    monkeypatch.setattr(accuracy_module, "_math_verify", lambda: None)
    completions = ["Answer: $42$.", "Answer: 0.5", "Answer: 4 2"]
    assert dapo_accuracy_reward(completions, solution=["42", "1/2", "42"]) == [1.0, -1.0, 1.0]


# Soft overlong punishment

L_MAX, L_CACHE = 20, 5


def punish(lengths, penalty_factor=1.0, build=SoftOverlongPunishment):
    return build(L_MAX, L_CACHE, penalty_factor)(completion_ids=[[7] * n for n in lengths])


def test_soft_overlong_punishment_follows_dapo_equation_13():
    lengths = [1, 14, 15, 16, 17, 18, 19, 20, 21, 40]
    values = punish(lengths)
    # 0 up to and at L_max - L_cache = 15, linear to -1 at L_max = 20, -1 beyond.
    np.testing.assert_allclose(values, [0, 0, 0, -0.2, -0.4, -0.6, -0.8, -1.0, -1.0, -1.0], atol=1e-12)
    np.testing.assert_allclose(values, [ref.soft_overlong_punishment(n, L_MAX, L_CACHE) for n in lengths])


@pytest.mark.parametrize("build", [SoftOverlongPunishment, soft_overlong_punishment])
def test_soft_overlong_punishment_scales_with_the_penalty_factor(build):
    lengths = [15, 16, 18, 20, 25]
    values = punish(lengths, penalty_factor=0.5, build=build)
    np.testing.assert_allclose(values, [0, -0.1, -0.3, -0.5, -0.5], atol=1e-12)
    np.testing.assert_allclose(values, [ref.soft_overlong_punishment(n, L_MAX, L_CACHE, 0.5) for n in lengths])


def test_soft_overlong_punishment_is_named_and_picklable():
    punishment = soft_overlong_punishment(L_MAX, L_CACHE, 2.0)
    assert punishment.__name__ == "soft_overlong_punishment"
    restored = pickle.loads(pickle.dumps(punishment))
    assert restored(completion_ids=[[1] * 18]) == punishment(completion_ids=[[1] * 18]) == [pytest.approx(-1.2)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((20, 0, 1.0), r"buffer_length=0 must satisfy 0 < buffer_length < max_completion_length \(20\)"),
        ((20, 20, 1.0), r"buffer_length=20 must satisfy"),
        ((20, -3, 1.0), r"buffer_length=-3 must satisfy"),
        ((20, 5, -1.0), r"penalty_factor=-1.0 must be >= 0"),
    ],
)
def test_soft_overlong_punishment_rejects_bad_lengths_and_factors(args, message):
    with pytest.raises(ValueError, match=message):
        SoftOverlongPunishment(*args)


# DAPOTrainer wiring of the punishment


def overlong_trainer(tmp_path, reward_funcs=None, **overrides):
    task = fresh_toy_task()
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling=False, **overrides)
    kwargs = {} if reward_funcs is None else {"reward_funcs": reward_funcs}
    return toy_trainer(DAPOTrainer, config, task, **kwargs)


def test_dapo_trainer_without_buffer_adds_no_punishment(tmp_path):
    trainer = overlong_trainer(tmp_path)
    assert trainer.reward_func_names == ["toy_accuracy_reward"]


def test_dapo_trainer_appends_the_configured_punishment_and_logs_it(tmp_path):
    trainer = overlong_trainer(
        tmp_path, max_completion_length=6, overlong_buffer_length=3, overlong_penalty_factor=0.5
    )
    assert trainer.reward_func_names == ["toy_accuracy_reward", "soft_overlong_punishment"]
    punishment = trainer.reward_funcs[-1]
    assert (punishment.max_completion_length, punishment.buffer_length, punishment.penalty_factor) == (6, 3, 0.5)
    assert trainer.reward_weights.tolist() == [1.0, 1.0]

    trainer.args.max_steps = 1
    scored = record_scored_batches(trainer)
    trainer.train()
    # Without overlong filtering every completion token is in the mask, so its row sum is the length the
    # punishment saw.
    lengths = scored[0]["completion_mask"].sum(dim=1).tolist()
    logged = list(trainer._logs["rewards"]["soft_overlong_punishment"])
    assert logged == pytest.approx([ref.soft_overlong_punishment(n, 6, 3, 0.5) for n in lengths])
    assert min(logged) < 0 and max(logged) == 0  # lengths both inside and before the buffer occurred
    mean_key = "rewards/soft_overlong_punishment/mean"
    logged_means = [entry[mean_key] for entry in trainer.state.log_history if mean_key in entry]
    assert logged_means == [pytest.approx(np.mean(logged))]


def test_dapo_trainer_extends_reward_weights_with_one(tmp_path):
    trainer = overlong_trainer(tmp_path, overlong_buffer_length=2, reward_weights=[2.0])
    assert trainer.reward_weights.tolist() == [2.0, 1.0]


def test_the_same_config_builds_a_second_trainer(tmp_path):
    """Building a trainer must not alter its config: a notebook re-run, or a resume from the saved
    training_args, reuses it."""
    task = fresh_toy_task()
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling=False, overlong_buffer_length=2, reward_weights=[2.0])
    toy_trainer(DAPOTrainer, config, task)
    assert config.reward_weights == [2.0]
    second = toy_trainer(DAPOTrainer, config, task)
    assert second.reward_weights.tolist() == [2.0, 1.0]


def test_dapo_trainer_rejects_reward_weights_of_the_wrong_length(tmp_path):
    with pytest.raises(ValueError, match="reward_weights has 2 entries but there are 1 reward functions"):
        overlong_trainer(tmp_path, overlong_buffer_length=2, reward_weights=[1.0, 1.0])


def test_dapo_trainer_refuses_a_second_punishment(tmp_path):
    task = fresh_toy_task()
    duplicated = [*task.reward_funcs, soft_overlong_punishment(6, 2)]
    with pytest.raises(ValueError, match=r"already contains a soft overlong punishment.*overlong_buffer_length=2"):
        overlong_trainer(tmp_path, reward_funcs=duplicated, overlong_buffer_length=2)


def test_trl_own_punishment_is_recognised_too(tmp_path):
    from trl.rewards import get_soft_overlong_punishment

    task = fresh_toy_task()
    trl_punishment = get_soft_overlong_punishment(max_completion_len=6, soft_punish_cache=2)
    with pytest.raises(ValueError, match="already contains a soft overlong punishment"):
        overlong_trainer(tmp_path, reward_funcs=[*task.reward_funcs, trl_punishment], overlong_buffer_length=2)
    # Listed first, TRL's punishment must not be taken for the accuracy reward that dynamic sampling filters on.
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling=True)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[trl_punishment, *task.reward_funcs])
    assert trainer.dynamic_sampler.metric_index == 1


def test_a_user_supplied_punishment_alone_is_kept(tmp_path):
    task = fresh_toy_task()
    trainer = overlong_trainer(tmp_path, reward_funcs=[*task.reward_funcs, soft_overlong_punishment(6, 2)])
    assert trainer.reward_func_names == ["toy_accuracy_reward", "soft_overlong_punishment"]


# Toy task reward


def test_toy_accuracy_reward_scores_the_first_word():
    completions = ["7", " 7 ", "7 and more", "8", "", "17"]
    assert toy_accuracy_reward(completions, answer=["7"] * 6) == [1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
    assert parse_answer("  12 34") == "12"


def test_toy_accuracy_reward_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="toy_accuracy_reward: got 2 completions but 1 answers"):
        toy_accuracy_reward(["1", "2"], answer=["1"])
