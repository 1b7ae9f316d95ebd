"""Dynamic sampling at trainer level: real `DAPOTrainer` runs on the toy task with purpose-made rewards.

The rewards (tests/dynamic_sampling/scripts/rewards.py) fix from the prompt which groups are informative and
record every call, so each keep/drop decision, count and metric can be recomputed independently of the code
under test. The trainer's own methods are wrapped on the instance to record what reaches the loss and the
forward passes, then call the original.
"""

import copy
import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling.checkpoint import STATE_FILE
from trl_variants.dynamic_sampling.sampler import DynamicSamplingExhaustedError
from trl_variants.dynamic_sampling.selection import NO_SIGNAL_STEPS, PassRateTracker, no_signal_warning
from trl_variants.rewards import SoftOverlongPunishment

from ..helpers import DAPO_AS_PUBLISHED, toy_config, toy_trainer
from .scripts.rewards import (
    ALL_CORRECT,
    LIVE,
    NOISE,
    ConstantReward,
    HalfDegenerateReward,
    ThreeWayAccuracyReward,
    generated_groups,
    is_live_prompt,
    prompt_class,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
G = 4  # num_generations in every run here
TOLERANCE = 1e-6  # DAPOConfig's default dynamic_sampling_tolerance




@pytest.fixture
def task(shared_task):
    """The module's toy task with a fresh copy of the warm-started policy, so runs don't see each other's updates."""
    return dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))


@dataclasses.dataclass
class Recorder:
    loss_inputs: list[dict] = dataclasses.field(default_factory=list)
    scored_batches: list[dict] = dataclasses.field(default_factory=list)
    logp_calls: list[dict] = dataclasses.field(default_factory=list)
    informative_batch_calls: int = 0


def record(trainer) -> Recorder:
    """Wraps the trainer's loss, scoring, log-prob and phase-1 methods on the instance to record their inputs."""
    recorder = Recorder()
    compute_loss = trainer._compute_loss
    generate_and_score = trainer._generate_and_score_completions
    logps = trainer._get_per_token_logps_and_entropies
    sample_informative = trainer.dynamic_sampler.sample_batch

    def detached(batch: dict) -> dict:
        return {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def recording_compute_loss(model, inputs):
        recorder.loss_inputs.append(detached(inputs))
        return compute_loss(model, inputs)

    def recording_generate_and_score(inputs):
        training = trainer.model.training
        output = generate_and_score(inputs)
        recorder.scored_batches.append(
            {"training": training, "input_prompts": [row["prompt"] for row in inputs], **detached(output)}
        )
        return output

    def recording_logps(model, input_ids, *args, **kwargs):
        recorder.logp_calls.append({"grad": torch.is_grad_enabled(), "input_ids": input_ids.detach().clone()})
        return logps(model, input_ids, *args, **kwargs)

    def counting_sample_informative(inputs, trl_generate_and_score):
        recorder.informative_batch_calls += 1
        return sample_informative(inputs, trl_generate_and_score)

    trainer._compute_loss = recording_compute_loss
    trainer._generate_and_score_completions = recording_generate_and_score
    trainer._get_per_token_logps_and_entropies = recording_logps
    trainer.dynamic_sampler.sample_batch = counting_sample_informative
    return recorder


def decoded_prompts(tokenizer, prompt_ids: torch.Tensor) -> list[str]:
    return tokenizer.batch_decode(prompt_ids, skip_special_tokens=True)


def rows(batch: dict) -> list[tuple[int, ...]]:
    """Each row of a batch as the token ids the model sees (prompt then completion), for multiset comparisons."""
    return sorted(map(tuple, torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1).tolist()))


def sampling_logs(trainer) -> list[dict]:
    return [entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry]


def is_informative(scores: list[float]) -> bool:
    return max(scores) - min(scores) > TOLERANCE


# 1 and 2: a reward that makes about half the groups degenerate; old-policy log-probs forced on.

PER_DEVICE_BATCH = 4
GRADIENT_ACCUMULATION = 2
STEPS_PER_GENERATION = 4  # one generation batch per two optimizer steps of two accumulation slices each
GENERATION_ROWS = PER_DEVICE_BATCH * STEPS_PER_GENERATION  # 16 rows: 4 groups per generation batch
OPTIMIZER_STEPS = 6


@pytest.fixture(scope="module")
def half_degenerate_run(shared_task, tmp_path_factory):
    """Six optimizer steps of two accumulation slices each, one generation batch per two steps. Because
    gradient_accumulation_steps (2) is no multiple of steps_per_generation (4), TRL computes old-policy log-probs
    under no-grad for every generation batch."""
    task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
    reward = HalfDegenerateReward(G)
    config = toy_config(
        DAPOConfig,
        tmp_path_factory.mktemp("half"),
        per_device_train_batch_size=PER_DEVICE_BATCH,
        gradient_accumulation_steps=GRADIENT_ACCUMULATION,
        steps_per_generation=STEPS_PER_GENERATION,
        max_steps=OPTIMIZER_STEPS,
        **DAPO_AS_PUBLISHED,  # carrying adds a no-grad forward over the carried rows (tested in test_carry.py)
    )
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward])
    recorder = record(trainer)
    trainer.train()
    return trainer, recorder, reward, task


def loss_inputs_by_generation(recorder: Recorder) -> list[list[dict]]:
    calls = recorder.loss_inputs
    return [calls[i : i + STEPS_PER_GENERATION] for i in range(0, len(calls), STEPS_PER_GENERATION)]


def test_only_informative_groups_reach_the_loss_at_constant_size(half_degenerate_run):
    trainer, recorder, reward, task = half_degenerate_run
    assert trainer.state.global_step == OPTIMIZER_STEPS
    assert len(recorder.loss_inputs) == OPTIMIZER_STEPS * GRADIENT_ACCUMULATION
    for inputs in recorder.loss_inputs:
        assert inputs["prompt_ids"].shape[0] == PER_DEVICE_BATCH
        prompts = decoded_prompts(task.tokenizer, inputs["prompt_ids"])
        assert all(is_live_prompt(p) for p in prompts), prompts
        # Live groups score 0, 1, 2, 3, so no completion of an informative group has a zero advantage.
        assert (inputs["advantages"].abs() > 1e-3).all(), inputs["advantages"]

    train_batches = [b for b in recorder.scored_batches if b["training"]]
    assert len(train_batches) == 3
    for batch in train_batches:
        # The scored batch still holds whole groups in order: every group's advantages differ.
        group_advantages = batch["advantages"].view(-1, G)
        assert (group_advantages.amax(dim=1) - group_advantages.amin(dim=1) > 1e-3).all()
        group_prompts = decoded_prompts(task.tokenizer, batch["prompt_ids"])[::G]
        assert all(is_live_prompt(p) for p in group_prompts)

    # The test is only meaningful if degenerate groups were generated and dropped.
    logs = sampling_logs(trainer)
    assert sum(entry["dynamic_sampling/generated_groups"] for entry in logs) > 3 * GENERATION_ROWS // G


def test_num_items_in_batch_is_the_trained_generation_batch_mask_sum(half_degenerate_run):
    _, recorder, _, _ = half_degenerate_run
    train_batches = [b for b in recorder.scored_batches if b["training"]]
    for batch, slices in zip(train_batches, loss_inputs_by_generation(recorder), strict=True):
        trained_tokens = sum(int(s["completion_mask"].sum()) for s in slices)
        assert trained_tokens == int(batch["completion_mask"].sum())
        for s in slices:
            assert int(s["num_items_in_batch"]) == trained_tokens


def test_pass_rate_metric_matches_the_reward_construction(half_degenerate_run):
    trainer, _, reward, _ = half_degenerate_run
    groups = generated_groups(reward.calls, G)
    logs = sampling_logs(trainer)
    assert [entry["step"] for entry in logs] == [1, 3, 5]
    for entry in logs:
        # The generation batch for optimizer step s is sampled while global_step is s - 1.
        step_groups = [g for g in groups if g["step"] == entry["step"] - 1]
        live = sum(is_live_prompt(g["prompt"]) for g in step_groups)
        assert all(is_informative(g["rewards"]) == is_live_prompt(g["prompt"]) for g in step_groups)
        assert entry["dynamic_sampling/generated_groups"] == len(step_groups)
        assert entry["dynamic_sampling/pass_rate"] == pytest.approx(live / len(step_groups))
        assert entry["dynamic_sampling/kept_groups"] == GENERATION_ROWS // G
        assert entry["dynamic_sampling/filled"] == 0.0
        assert entry["dynamic_sampling/all_wrong_frac"] == pytest.approx(1 - live / len(step_groups))
        step_calls = [call for call in reward.calls if call["step"] == entry["step"] - 1]
        tokens = sum(len(ids) for call in step_calls for ids in call["completion_ids"])
        assert entry["dynamic_sampling/generated_tokens"] == tokens
    # Half the train prompts are live, so the observed rate sits near 0.5.
    total_live = sum(is_live_prompt(g["prompt"]) for g in groups)
    assert 0.25 < total_live / len(groups) < 0.75


def test_no_forward_pass_on_dropped_groups(half_degenerate_run):
    _, recorder, _, _ = half_degenerate_run
    no_grad_calls = [call for call in recorder.logp_calls if not call["grad"]]
    train_batches = [b for b in recorder.scored_batches if b["training"]]
    # One old-policy pass per generation batch, and only over its trained rows.
    assert len(no_grad_calls) == len(train_batches) == 3
    for call, slices in zip(no_grad_calls, loss_inputs_by_generation(recorder), strict=True):
        assert call["input_ids"].shape[0] == GENERATION_ROWS
        trained_rows = sorted(row for s in slices for row in rows(s))
        assert sorted(map(tuple, call["input_ids"].tolist())) == trained_rows


def test_reward_functions_run_once_per_generated_completion(half_degenerate_run):
    trainer, _, reward, _ = half_degenerate_run
    generated = sum(entry["dynamic_sampling/generated_groups"] for entry in sampling_logs(trainer))
    assert reward.rows_scored == generated * G
    # Only phase 1 calls the reward: no call happens at a step without a generation batch.
    assert {call["step"] for call in reward.calls} == {0, 2, 4}


# 3: filtering on accuracy, not on the length-shaped total; float noise is no difference.


THREE_WAY_STEPS = 3
THREE_WAY_GROUPS = 4  # 16 rows per step


def three_way_run(shared_task, tmp_path, metric):
    """Trains on `ThreeWayAccuracyReward` plus the soft overlong punishment; returns the trainer, every generated
    group (with its total reward recomputed) and the prompts of the rows that reached the loss, per step."""
    task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
    reward = ThreeWayAccuracyReward()
    config = toy_config(
        DAPOConfig,
        tmp_path / metric,
        max_steps=THREE_WAY_STEPS,
        overlong_buffer_length=4,  # punishment starts after 2 of the 6 completion tokens
        temperature=2.0,  # varied completion lengths, so all-correct groups differ in punishment
        dynamic_sampling_metric=metric,
        **DAPO_AS_PUBLISHED,  # every kept group is this step's, as the expected selection assumes
    )
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward])
    recorder = record(trainer)
    trainer.train()
    punishment = SoftOverlongPunishment(config.max_completion_length, config.overlong_buffer_length)
    groups = generated_groups(reward.calls, G)
    for group in groups:
        group["total"] = [r + p for r, p in zip(group["rewards"], punishment(group["completion_ids"]), strict=True)]
    trained_prompts = [decoded_prompts(task.tokenizer, inputs["prompt_ids"]) for inputs in recorder.loss_inputs]
    return trainer, groups, trained_prompts


def expected_kept_groups(trainer, groups, decides, trained_prompts) -> list[dict]:
    """Checks each step against a recomputation: the pass rate, and the trained rows being exactly the first
    `THREE_WAY_GROUPS` informative groups in generation order. Returns the groups that should have been kept."""
    kept = []
    logs = sampling_logs(trainer)
    assert len(logs) == len(trained_prompts) == THREE_WAY_STEPS
    for entry, prompts in zip(logs, trained_prompts, strict=True):
        step_groups = [g for g in groups if g["step"] == entry["step"] - 1]
        informative = [g for g in step_groups if decides(g)]
        assert entry["dynamic_sampling/pass_rate"] == pytest.approx(len(informative) / len(step_groups))
        assert entry["dynamic_sampling/filled"] == 0.0
        step_kept = informative[:THREE_WAY_GROUPS]
        assert sorted(prompts) == sorted(g["prompt"] for g in step_kept for _ in range(G))
        kept.extend(step_kept)
    return kept


def test_all_correct_groups_are_dropped_on_accuracy_and_kept_on_total(shared_task, tmp_path):
    trainer, groups, trained_prompts = three_way_run(shared_task, tmp_path, "accuracy")
    kept = expected_kept_groups(trainer, groups, lambda g: prompt_class(g["prompt"]) == LIVE, trained_prompts)
    assert all(prompt_class(g["prompt"]) == LIVE for g in kept)
    # The run generated what the default must drop: all-correct groups whose punishments differ, and float noise.
    assert any(prompt_class(g["prompt"]) == ALL_CORRECT and is_informative(g["total"]) for g in groups)
    noise = [g for g in groups if prompt_class(g["prompt"]) == NOISE]
    assert noise and all(0 < max(g["rewards"]) - min(g["rewards"]) < TOLERANCE for g in noise)

    trainer, groups, trained_prompts = three_way_run(shared_task, tmp_path, "total")
    kept = expected_kept_groups(trainer, groups, lambda g: is_informative(g["total"]), trained_prompts)
    assert any(prompt_class(g["prompt"]) == ALL_CORRECT for g in kept), "an all-correct group must be kept on total"


# 4: the bound on generation rounds.


def test_always_degenerate_reward_fills_the_batch_and_trains_on(task, tmp_path):
    config = toy_config(DAPOConfig, tmp_path, max_steps=2, dynamic_sampling_max_rounds=3)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[ConstantReward()])
    recorder = record(trainer)
    trainer.train()
    assert trainer.state.global_step == 2
    logs = sampling_logs(trainer)
    assert len(logs) == 2
    for entry in logs:
        assert entry["dynamic_sampling/filled"] == 1.0
        assert entry["dynamic_sampling/rounds"] == 3
        assert entry["dynamic_sampling/kept_groups"] == 0
        assert entry["dynamic_sampling/pass_rate"] == 0.0
        assert entry["dynamic_sampling/all_correct_frac"] == 1.0
        assert entry["dynamic_sampling/generated_groups"] > 4
    for inputs in recorder.loss_inputs:
        assert inputs["prompt_ids"].shape[0] == 16
        assert (inputs["advantages"] == 0).all()


def test_a_run_without_signal_is_warned_once_with_the_rewards_it_saw(task, tmp_path, caplog):
    """A constant reward under the default `dynamic_sampling_on_exhausted="fill"` trains on with loss 0: after
    NO_SIGNAL_STEPS steps without an informative group, one warning names the values the reward returned."""
    config = toy_config(DAPOConfig, tmp_path, max_steps=NO_SIGNAL_STEPS + 2, dynamic_sampling_max_rounds=2)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[ConstantReward()])
    with caplog.at_level(logging.WARNING, logger="trl_variants.dynamic_sampling.sampler"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "no informative group" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"Dynamic sampling found no informative group in {NO_SIGNAL_STEPS} consecutive")
    assert "Rewards seen in the latest step: constant_reward: [1.0]" in warnings[0]


def test_the_no_signal_warning_names_unscored_rows():
    message = no_signal_warning(3, {"accuracy": [0.0, None, 0.0, None], "format": [1.0, 0.5, 1.0, 1.0]})
    assert "accuracy: [0.0] and None for 2 of 4 rows; format: [0.5, 1.0]." in message


def test_the_steps_without_signal_are_counted_and_reset_by_a_step_with_signal():
    tracker = PassRateTracker()
    for informative, expected in ((0, 1), (0, 2), (3, 0), (0, 1)):
        tracker.update(informative, 8)
        assert tracker.steps_without_signal == expected


def test_always_degenerate_reward_raises_when_asked(task, tmp_path):
    config = toy_config(
        DAPOConfig, tmp_path, max_steps=2, dynamic_sampling_max_rounds=2, dynamic_sampling_on_exhausted="raise"
    )
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[ConstantReward()])
    with pytest.raises(DynamicSamplingExhaustedError) as raised:
        trainer.train()
    message = str(raised.value)
    assert "found 0 informative groups of the 4 needed after 2 rounds" in message
    assert "pass rate 0.000" in message
    assert "dynamic_sampling_max_rounds" in message and 'dynamic_sampling_on_exhausted="fill"' in message
    assert trainer.state.global_step == 0


# 5: evaluation never filters.


def test_evaluation_keeps_the_dataloader_groups(task, tmp_path):
    reward = HalfDegenerateReward(G)
    config = toy_config(DAPOConfig, tmp_path, per_device_eval_batch_size=16)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward], eval_dataset=task.eval_dataset)
    recorder = record(trainer)
    metrics = trainer.evaluate()
    assert recorder.informative_batch_calls == 0
    assert not [key for key in metrics if "dynamic_sampling" in key]
    assert "eval_reward" in metrics
    eval_batches = [b for b in recorder.scored_batches if not b["training"]]
    assert len(eval_batches) == len(task.eval_dataset) * G // 16
    seen_degenerate = 0
    for batch in eval_batches:
        assert decoded_prompts(task.tokenizer, batch["prompt_ids"]) == batch["input_prompts"]
        for prompt, advantages in zip(batch["input_prompts"][::G], batch["advantages"].view(-1, G), strict=True):
            if not is_live_prompt(prompt):
                seen_degenerate += 1
                assert (advantages == 0).all()
    assert seen_degenerate > 0


# 6: bad input at construction.


def test_bad_dynamic_sampling_settings_are_refused(task, tmp_path):
    with pytest.raises(ValueError, match=r"num_generations=1 is not allowed; expected an integer >= 2"):
        toy_config(DAPOConfig, tmp_path, num_generations=1)
    with pytest.raises(ValueError, match=r"dynamic_sampling_max_rounds=0 is not allowed; expected an integer >= 1"):
        toy_config(DAPOConfig, tmp_path, dynamic_sampling_max_rounds=0)
    with pytest.raises(ValueError, match=r"dynamic_sampling_on_exhausted='retry' is not allowed"):
        toy_config(DAPOConfig, tmp_path, dynamic_sampling_on_exhausted="retry")

    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling_metric="correctness")
    with pytest.raises(ValueError, match=r"dynamic_sampling_metric='correctness' is not allowed.*toy_accuracy_reward"):
        toy_trainer(DAPOTrainer, config, task)
    # "accuracy" needs a reward besides the overlong punishment.
    config = toy_config(DAPOConfig, tmp_path, overlong_buffer_length=2)
    with pytest.raises(ValueError, match=r'dynamic_sampling_metric="accuracy" needs a reward function'):
        toy_trainer(DAPOTrainer, config, task, reward_funcs=None)

    # A reward function's name is a valid metric.
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling_metric="toy_accuracy_reward")
    named = toy_trainer(DAPOTrainer, config, task)
    assert named.dynamic_sampler.metric_index == 0


# 7: resume from a checkpoint mid-run.


def record_refill_draws(trainer) -> list[dict]:
    draws = []
    sampler = trainer.dynamic_sampler.refill
    draw = sampler.draw

    def recording_draw(count):
        before = {"epoch": sampler.epoch, "position": sampler.position, "estimate": trainer.dynamic_sampler.pass_rate.estimate}
        indices = draw(count)
        draws.append({"step": trainer.state.global_step, "before": before, "indices": indices})
        return indices

    sampler.draw = recording_draw
    return draws


@pytest.mark.slow
def test_resume_continues_the_refill_sampler(shared_task, tmp_path):
    def run(output_dir, resume_from=None):
        task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
        config = toy_config(DAPOConfig, output_dir, max_steps=4, save_strategy="steps", save_steps=2)
        trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
        draws = record_refill_draws(trainer)
        trainer.train(resume_from_checkpoint=resume_from)
        return trainer, draws

    first, first_draws = run(tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoint-2"
    state = json.loads((checkpoint / STATE_FILE).read_text())
    saved = state["refill_sampler"]
    assert saved["position"] > 0 or saved["epoch"] > 0, "the first two steps must have drawn refill prompts"
    assert state["pass_rate_estimate"] is not None

    resumed, resumed_draws = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert resumed.state.global_step == 4
    assert resumed_draws, "the resumed steps must draw refill prompts"
    first_draw = resumed_draws[0]
    assert first_draw["step"] == 2
    assert (first_draw["before"]["epoch"], first_draw["before"]["position"]) == (saved["epoch"], saved["position"])
    assert first_draw["before"]["estimate"] == pytest.approx(state["pass_rate_estimate"])
    # The resumed run draws the prompts the uninterrupted run drew after step 2, not the sampler's opening ones.
    continued = [i for d in first_draws if d["step"] >= 2 for i in d["indices"]]
    resumed_indices = [i for d in resumed_draws for i in d["indices"]]
    common = min(len(continued), len(resumed_indices))
    assert common > 0 and resumed_indices[:common] == continued[:common]
    opening = [i for d in first_draws for i in d["indices"]][:common]
    assert resumed_indices[:common] != opening


def test_reference_log_probs_are_computed_on_the_trained_rows_only(shared_task, tmp_path):
    """With beta > 0 TRL runs the reference model over the batch; a policy saved to a folder lets TRL build that
    reference model offline. Both the reference pass and nothing else run under no-grad, over the kept rows only."""
    model_dir = tmp_path / "policy"
    shared_task.model.save_pretrained(model_dir)
    shared_task.tokenizer.save_pretrained(model_dir)
    reward = HalfDegenerateReward(G)
    config = toy_config(
        DAPOConfig, tmp_path / "run", per_device_train_batch_size=GENERATION_ROWS, beta=0.04, max_steps=2,
        **DAPO_AS_PUBLISHED,  # carrying adds a no-grad forward over the carried rows
    )  # fmt: skip
    trainer = DAPOTrainer(
        str(model_dir),
        [reward],
        args=config,
        train_dataset=shared_task.train_dataset,
        processing_class=shared_task.tokenizer,
    )
    assert trainer.ref_model is not None
    recorder = record(trainer)
    trainer.train()

    generated = sum(entry["dynamic_sampling/generated_groups"] for entry in sampling_logs(trainer))
    assert generated > 2 * GENERATION_ROWS // G, "the reward should have forced refills, so that groups were dropped"
    no_grad_calls = [call for call in recorder.logp_calls if not call["grad"]]
    assert len(no_grad_calls) == 2  # one reference pass per generation batch
    for call, trained in zip(no_grad_calls, recorder.loss_inputs, strict=True):
        assert call["input_ids"].shape[0] == GENERATION_ROWS
        assert sorted(map(tuple, call["input_ids"].tolist())) == rows(trained)
    assert all("kl" in entry for entry in trainer.state.log_history if "loss" in entry)


def test_plain_generation_capped_at_one_generation_batch_never_exceeds_it(task, tmp_path):
    """Refill rounds can ask for several batches' worth of groups, which go to `generate` in one call by default;
    with `max_rows_per_generate_call` set to the dataloader's rows, each model `generate` call holds at most those,
    so dynamic sampling needs no more generation memory than TRL itself."""
    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=8, max_steps=4, max_rows_per_generate_call=8)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    model_generate, call_rows = trainer.model.generate, []

    def counting_generate(*args, **kwargs):
        call_rows.append(kwargs["input_ids"].shape[0])
        return model_generate(*args, **kwargs)

    trainer.model.generate = counting_generate
    trainer.train()
    logs = sampling_logs(trainer)
    # Phase 1 generates every row; the replay into TRL's scoring pass generates none.
    assert sum(call_rows) == sum(entry["dynamic_sampling/generated_groups"] for entry in logs) * G
    batch_groups = 8 // G
    assert any(
        entry["dynamic_sampling/generated_groups"] > entry["dynamic_sampling/rounds"] * batch_groups for entry in logs
    ), "no round larger than a generation batch happened"
    assert max(call_rows) <= 8


def test_a_reward_named_like_a_keyword_can_be_chosen(task, tmp_path):
    def total(completions, **kwargs):
        return [float(len(text)) for text in completions]

    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling_metric="total")
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[*task.reward_funcs, total])
    assert trainer.dynamic_sampler.metric_index == 1


def test_carrying_is_refused_for_vision_language_models(task, tmp_path):
    """A carried row's generating log-probs are recorded from its token ids alone, without its images, so carrying
    is refused for a VLM (tests/dynamic_sampling/test_replay.py trains a real one without carrying); the trainer's
    own VLM flag is set on a text trainer here."""
    config = toy_config(DAPOConfig, tmp_path, dynamic_sampling_carry_surplus=True)
    trainer = toy_trainer(DAPOTrainer, config, task)
    trainer._is_vlm = True
    with pytest.raises(ValueError, match="dynamic_sampling_carry_surplus=True is not allowed: vision-language models"):
        trainer.setup_dynamic_sampling()


def test_default_carrying_turns_off_for_vision_language_models_and_says_why(task, tmp_path, caplog):
    """The default (None) never refuses a run: for a VLM it trains without carrying and names the reason."""
    trainer = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path, skip_degenerate_prompts=True), task)
    assert trainer.dynamic_sampler.options.carry_surplus and trainer.dynamic_sampler.options.skip_degenerate_prompts
    trainer._is_vlm = True
    with caplog.at_level(logging.INFO, logger="trl_variants.dynamic_sampling.sampler"):
        trainer.setup_dynamic_sampling()
    assert not trainer.dynamic_sampler.options.carry_surplus and trainer.dynamic_sampler.options.skip_degenerate_prompts
    assert "surplus groups are not carried: vision-language models are not supported" in caplog.text
    assert "False (vision-language models" in str(trainer._variant_settings()["dynamic sampling carries surplus groups"])
