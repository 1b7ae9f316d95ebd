"""vLLM sleep mode (`vllm_enable_sleep_mode=True`, colocate): a step's generation rounds cost one weight sync.

TRL 1.16 puts the engine to sleep at level 2 (weights discarded) after every generate call and pushes every weight
again before the next; `dynamic_sampling.trl_hooks.engine_awake_across_rounds` keeps the engine awake from the first
round's call to the last round's. vLLM's CPU build refuses `enable_sleep_mode` when it builds an engine, and its
workers ignore sleep and wake-up (the engine's own bookkeeping, the paused scheduler and the sleeping tags, does run).
So the session's engine is built as usual, TRL's generation object is switched to sleep mode as its constructor
would have left it, and the one thing a GPU does that the CPU build does not, discarding the weights at level 2, is
checked at the boundary: before every vLLM generate call, the engine must be awake, no level-2 sleep may have come
since the last weight sync, and the engine's weights must be the trainer's.
"""

import contextlib
import dataclasses

import pytest

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling import trainer as trainer_module

from ..dynamic_sampling.scripts.rewards import HalfDegenerateReward
from ..helpers import DAPO_AS_PUBLISHED
from .helpers import engine_weight_error, vllm_config, vllm_trainer

pytestmark = pytest.mark.vllm

G = 4
STEPS = 4


@dataclasses.dataclass
class SleepModeRun:
    rounds: list[int]  # generation rounds of each step
    syncs: list[int]  # the step of every weight sync
    sleeps: list[int]  # the step of every level-2 sleep
    generate_calls: list[int]  # the step of every vLLM generate call


def sleep_mode_run(shared_engine, vllm_policy, output_dir, monkeypatch) -> SleepModeRun:
    task, folder = vllm_policy
    # DAPO as published: nothing is carried, so refill rounds are needed in most steps.
    config = vllm_config(DAPOConfig, output_dir, max_steps=STEPS, **DAPO_AS_PUBLISHED)
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
    generation = trainer.vllm_generation
    llm = generation.llm
    run = SleepModeRun(rounds=[], syncs=[], sleeps=[], generate_calls=[])
    discarded = [False]
    sleep, generate, sync_weights = llm.sleep, llm.generate, generation.sync_weights

    def level_two_discards(level=1, **kwargs):
        sleep(level=level, **kwargs)
        if level >= 2:
            discarded[0] = True
            run.sleeps.append(trainer.state.global_step)

    def synced(*args, **kwargs):
        sync_weights(*args, **kwargs)
        discarded[0] = False
        run.syncs.append(trainer.state.global_step)

    def checked_generate(*args, **kwargs):
        assert not llm.llm_engine.is_sleeping(), "vLLM generate called while the engine sleeps"
        assert not discarded[0], "vLLM generate called after a level-2 sleep without a weight sync"
        assert engine_weight_error(trainer) <= 1.0, "vLLM generates from weights other than the trainer's"
        run.generate_calls.append(trainer.state.global_step)
        return generate(*args, **kwargs)

    monkeypatch.setattr(llm, "sleep", level_two_discards)
    monkeypatch.setattr(llm, "generate", checked_generate)
    monkeypatch.setattr(generation, "sync_weights", synced)
    # As TRL's VLLMGeneration leaves an engine built with enable_sleep_mode=True: asleep at level 2.
    generation.enable_sleep_mode = True
    llm.sleep(level=2)
    generation._llm_weights_sleeping = True
    try:
        trainer.train()
    finally:
        # The session's engine serves the other tests awake; each trainer syncs its own weights before generating.
        llm.wake_up()
    assert trainer.state.global_step == STEPS
    run.rounds = [int(entry["dynamic_sampling/rounds"]) for entry in trainer.state.log_history if "loss" in entry]
    return run


def test_a_steps_rounds_cost_one_weight_sync_in_sleep_mode(shared_engine, vllm_policy, tmp_path, monkeypatch):
    run = sleep_mode_run(shared_engine, vllm_policy, tmp_path / "awake", monkeypatch)
    assert max(run.rounds) > 1, "the run must need refill rounds to test them"
    assert run.generate_calls == [step for step, rounds in enumerate(run.rounds) for _ in range(rounds)]
    # One weight sync and one level-2 sleep per step, whatever its number of rounds (the first sleep is the one a
    # sleep-mode engine starts with).
    assert run.syncs == list(range(STEPS))
    assert run.sleeps == [0, *range(STEPS)]
    print(f"rounds per step {run.rounds}: weight syncs per step {[run.syncs.count(s) for s in range(STEPS)]}")


def test_without_keeping_the_engine_awake_each_round_costs_a_weight_sync(
    shared_engine, vllm_policy, tmp_path, monkeypatch
):
    """TRL's own behaviour, which the test above improves on: the boundary checks hold, at one sync per round."""
    monkeypatch.setattr(trainer_module, "engine_awake_across_rounds", lambda trainer: contextlib.nullcontext())
    run = sleep_mode_run(shared_engine, vllm_policy, tmp_path / "trl", monkeypatch)
    assert max(run.rounds) > 1, "the run must need refill rounds to test them"
    assert run.syncs == run.generate_calls == [step for step, rounds in enumerate(run.rounds) for _ in range(rounds)]
    print(f"rounds per step {run.rounds}: weight syncs per step {[run.syncs.count(s) for s in range(STEPS)]}")
