"""Dynamic sampling on a streaming training dataset (`datasets.IterableDataset`).

The reader's rules are checked on plain streams; the trainer runs check that refill prompts are the stream's next
unread rows and never repeat a prompt of the batch, that a checkpoint resumes the stream where it was, that prompt
skipping keys its history by prompt hash, and that a stream with nothing left ends the rounds as the exhaustion
policy says.
"""

import copy
import dataclasses
import json

import pytest
from datasets import Dataset, IterableDataset

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling.prompt_sources import STREAM_KEY_SPACE, StreamRefill, prompt_key
from trl_variants.dynamic_sampling.checkpoint import STATE_FILE
from trl_variants.dynamic_sampling.sampler import DynamicSamplingExhaustedError

from ..helpers import toy_config, toy_trainer
from .scripts.rewards import ConstantReward, HalfDegenerateReward, generated_groups, is_live_prompt

G = 4


def prompts_stream(prompts: list[str]) -> IterableDataset:
    return Dataset.from_dict({"prompt": prompts}).to_iterable_dataset()


def test_reader_reads_in_order_passes_over_taken_prompts_and_starts_a_new_pass():
    reader = StreamRefill(prompts_stream(["a", "b", "c"]), seed=0, shuffle=False, is_main_process=True)
    taken = {prompt_key("b")}
    assert [row["prompt"] for row in reader.read(2, taken)] == ["a", "c"]
    assert taken == {prompt_key(p) for p in "abc"}
    assert reader.state_dict() == {"stream": {"pass_index": 0, "position": 3, "rows_per_pass": None}}
    # The next pass starts over; a fresh batch takes "a" again.
    assert [row["prompt"] for row in reader.read(1, set())] == ["a"]
    assert reader.state_dict() == {"stream": {"pass_index": 1, "position": 1, "rows_per_pass": 3}}


def test_reader_returns_short_when_a_whole_pass_has_nothing_unread():
    reader = StreamRefill(prompts_stream(["a", "b"]), seed=0, shuffle=False, is_main_process=True)
    assert [row["prompt"] for row in reader.read(5, set())] == ["a", "b"]
    assert reader.read(1, {prompt_key("a"), prompt_key("b")}) == []


def test_reader_returns_short_on_a_stream_that_cannot_be_read_again():
    rows = iter([{"prompt": "a"}, {"prompt": "b"}])

    class OneShot:
        def __iter__(self):
            return rows

    reader = StreamRefill(OneShot(), seed=0, shuffle=False, is_main_process=True)
    assert [row["prompt"] for row in reader.read(3, set())] == ["a", "b"]


def test_reader_resumes_at_its_position():
    stream = prompts_stream([str(i) for i in range(10)])
    reader = StreamRefill(stream, seed=3, shuffle=True, is_main_process=True)
    first = [row["prompt"] for row in reader.read(4, set())]
    rest = [row["prompt"] for row in reader.read(4, set())]
    resumed = StreamRefill(stream, seed=3, shuffle=True, is_main_process=True)
    resumed.load_state_dict(json.loads(json.dumps({"stream": {**reader.state_dict()["stream"], "position": 4}})))
    assert [row["prompt"] for row in resumed.read(4, set())] == rest
    assert sorted(first + rest) != sorted(first)


def test_rows_without_a_prompt_are_told_apart_by_their_content():
    """An environment may supply the prompt: such rows are identified by their other fields."""
    stream = Dataset.from_dict({"task": [1, 2, 1]}).to_iterable_dataset()
    reader = StreamRefill(stream, seed=0, shuffle=False, is_main_process=True)
    assert [row["task"] for row in reader.read(3, set())] == [1, 2]


def test_prompt_key_is_stable_and_in_range():
    messages = [{"role": "user", "content": "2+3="}]
    assert prompt_key(messages) == prompt_key(copy.deepcopy(messages))
    assert prompt_key("2+3=") != prompt_key("3+2=")
    assert 0 <= prompt_key("2+3=") < STREAM_KEY_SPACE


@pytest.fixture
def task(shared_task):
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


def generated_by_step(reward) -> list[list[str]]:
    """The prompt of every group generated per step, in generation order, from the reward's own record (phase 2
    replays the rewards, so every call is a generation round's)."""
    steps: dict[int, list[str]] = {}
    for group in generated_groups(reward.calls, G):
        steps.setdefault(group["step"], []).append(group["prompt"])
    return [steps[step] for step in sorted(steps)]


def stream_trainer(task, tmp_path, reward, stream=None, **overrides):
    defaults = {"per_device_train_batch_size": 8, "max_steps": 3, "shuffle_dataset": False}
    config = toy_config(DAPOConfig, tmp_path, **{**defaults, **overrides})
    train = stream if stream is not None else task.train_dataset.to_iterable_dataset()
    return toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward], train_dataset=train)


def test_refill_prompts_are_the_streams_next_unread_prompts(task, tmp_path):
    reward = HalfDegenerateReward(G)
    trainer = stream_trainer(task, tmp_path, reward, dataloader_num_workers=2)
    assert trainer.args.dataloader_num_workers == 0  # TRL's rule for streams, as under GRPOTrainer
    trainer.train()
    assert trainer.state.global_step == 3
    steps = generated_by_step(reward)
    order = list(task.train_dataset["prompt"])
    cursor = 0
    for generated in steps:
        assert len(set(generated)) == len(generated), "a prompt was generated twice in one batch"
        # The first two groups are the dataloader's; the refills continue the stream where the last step stopped,
        # passing over the prompts already in this batch.
        expected = []
        while len(expected) < len(generated) - 2:
            if order[cursor] not in generated[:2] + expected:
                expected.append(order[cursor])
            cursor += 1
        assert generated[2:] == expected
    assert cursor > 0, "the half-degenerate reward must have needed refills"
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/kept_groups" in entry]
    assert [entry["dynamic_sampling/kept_groups"] for entry in logs] == [2, 2, 2]


@pytest.mark.slow
def test_checkpoint_resumes_the_stream_and_the_prompt_history_where_they_were(task, tmp_path):
    shared = dataclasses.replace(task, model=copy.deepcopy(task.model))
    full_reward, resumed_reward = HalfDegenerateReward(G), HalfDegenerateReward(G)
    full = stream_trainer(
        shared, tmp_path / "full", full_reward, save_strategy="steps", save_steps=2, skip_degenerate_prompts=True,
    )  # fmt: skip
    full.train()
    state = json.loads((tmp_path / "full" / "checkpoint-2" / STATE_FILE).read_text())
    assert state["refill_sampler"]["stream"]["position"] > 0

    resumed = stream_trainer(task, tmp_path / "resumed", resumed_reward, skip_degenerate_prompts=True)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert generated_by_step(resumed_reward) == generated_by_step(full_reward)[2:]
    assert resumed.dynamic_sampler.refill.state_dict() == full.dynamic_sampler.refill.state_dict()
    for name, values in full.dynamic_sampler.skipper.arrays_owner.arrays().items():
        assert (resumed.dynamic_sampler.skipper.arrays_owner.arrays()[name] == values).all(), name
    assert full.dynamic_sampler.skipper.arrays_owner.arrays()["updated"].max() >= 0, "the posterior must have recorded prompts"


def test_skipping_keys_stream_prompts_by_their_hash(task, tmp_path):
    trainer = stream_trainer(
        task, tmp_path, HalfDegenerateReward(G), skip_degenerate_prompts=True, skip_predictor="streak",
        skip_probability_step=0.5, max_steps=4,
    )  # fmt: skip
    trainer.train()
    history = trainer.dynamic_sampler.skipper.history
    assert len(history.streak) == STREAM_KEY_SPACE
    dead = [prompt for prompt in task.train_dataset["prompt"] if not is_live_prompt(prompt)]
    assert any(history.streak[prompt_key(prompt)] > 0 for prompt in dead)
    assert all(history.streak[prompt_key(p)] == 0 for p in task.train_dataset["prompt"] if is_live_prompt(p))


@pytest.mark.parametrize(("on_exhausted", "skipping"), [("fill", False), ("raise", False), ("fill", True)])
def test_a_stream_with_nothing_unread_ends_the_rounds(on_exhausted, skipping, task, tmp_path):
    # Two prompts, both in every batch, all groups degenerate: no refill can be found.
    stream = prompts_stream(["1+2=", "3+4="])
    trainer = stream_trainer(
        task, tmp_path, ConstantReward(), stream=stream, dynamic_sampling_on_exhausted=on_exhausted,
        max_steps=2 if skipping else 1, skip_degenerate_prompts=skipping,
    )  # fmt: skip
    if on_exhausted == "raise":
        with pytest.raises(DynamicSamplingExhaustedError, match="streaming train_dataset had no unread prompt left"):
            trainer.train()
        return
    trainer.train()
    entries = [entry for entry in trainer.state.log_history if "dynamic_sampling/filled" in entry]
    assert len(entries) == trainer.state.global_step
    for entry in entries:
        assert entry["dynamic_sampling/filled"] == 1.0 and entry["dynamic_sampling/generated_groups"] == 2


def test_a_checkpoint_of_one_dataset_kind_is_refused_by_the_other():
    from trl_variants.dynamic_sampling.prompt_sources import RefillSampler
    from trl_variants.dynamic_sampling.prompt_sources import StreamRefill

    stream_state = StreamRefill(prompts_stream(["a"]), seed=0, shuffle=False, is_main_process=True).state_dict()
    with pytest.raises(ValueError, match="refill state is a streaming dataset's, but train_dataset is map-style"):
        RefillSampler(dataset_size=3, seed=0).load_state_dict(stream_state)
    with pytest.raises(ValueError, match="refill state is a map-style dataset's, but train_dataset is a stream"):
        StreamRefill(prompts_stream(["a"]), 0, False, True).load_state_dict(RefillSampler(3, 0).state_dict())


def test_a_stream_that_fails_to_read_raises_a_clear_error():
    from trl_variants.dynamic_sampling.prompt_sources import StreamRefill

    class Broken:
        def __iter__(self):
            raise ConnectionError("shard 3 unreachable")

    refill = StreamRefill(Broken(), seed=0, shuffle=False, is_main_process=True)
    refill.begin_step([])
    with pytest.raises(RuntimeError, match="reading refill prompts from the streaming train_dataset failed: "
                       "ConnectionError: shard 3 unreachable"):  # fmt: skip
        refill.draw(2)
