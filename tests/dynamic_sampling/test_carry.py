"""Carrying surplus informative groups to the next generation batch (`dynamic_sampling_carry_surplus=True`).

The pure sizing and bookkeeping are tested without a model in test_carry_planning.py. The trainer tests run real
`DAPOTrainer` steps on the toy task with a prompt-controlled reward (half the prompts give informative groups), in
TRL's default layout and in layouts where a generation batch trains several optimizer updates, snapshot the policy's
weights at the start of every generation batch and at every loss call, and check what TRL's loss receives one batch
later: a carried row's old log-probs (and, with simulated vLLM sampling log-probs, its importance-sampling ratio)
must come from the snapshot of the batch that generated it, not from the policy that trains on it. The log-probs the tests expect are computed here, by a plain
forward of the snapshot model, not by the code under test.
"""

import copy
import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling import trl_hooks
from trl_variants.dynamic_sampling.carry import trl_computes_old_logps
from trl_variants.dynamic_sampling.checkpoint import CARRIED_FILE, MANIFEST_FILE
from trl_variants.reliability.checkpoints import checkpoint_problems

from ..helpers import DAPO_AS_PUBLISHED, run_launch, toy_config, toy_trainer, two_process_command
from .scripts.rewards import HalfDegenerateReward, is_live_prompt

G = 4
STEPS = 4
BATCH_GROUPS = 4  # toy_config's 16 rows per device, one process
SAMPLING_OFFSET = 0.05  # the simulated vLLM samples each token with log-prob (training policy's - this)
ATOL = 1e-5


# Trainer runs.




def completion_logps(model, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    """Log-probs of `completion_ids` after `prompt_ids` under `model` (temperature 1), one unpadded row."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt_ids) - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


def simulate_vllm(trainer) -> None:
    """Makes the trainer behave as with vLLM at the boundary: phase-1 generation returns per-token sampling
    log-probs (the training policy's, shifted by SAMPLING_OFFSET, as a mismatched inference engine would), and
    weight sync is a no-op. Everything after generation is TRL's vLLM code path."""
    generate = trainer._generate
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    trainer.vllm_generation = SimpleNamespace(sync_weights=lambda: None, mode="colocate", enable_sleep_mode=False)
    trainer._last_loaded_step = -1

    def vllm_like_generate(prompts):
        if trainer.rollout_func is not None:  # phase 2 replays through TRL's rollout hook
            return generate(prompts)
        trainer.use_vllm = False
        try:
            output = list(generate(prompts))
        finally:
            trainer.use_vllm = True
        output[4] = [
            (completion_logps(trainer.model, p, c) - SAMPLING_OFFSET).tolist() for p, c in zip(output[0], output[1])
        ]
        return tuple(output)

    trainer._generate = vllm_like_generate


@dataclasses.dataclass
class Step:
    """One generation batch: one optimizer step in TRL's default layout, several in `steps_per_generation` > 1."""

    policy: torch.nn.Module  # the model as phase 1 of this step saw it: the generating policy
    carried_out: list[tuple[list[int], list[int]]]  # rows the trainer carries to the next step
    loss_inputs: list[dict] = dataclasses.field(default_factory=list)
    loss_policies: list[torch.nn.Module] = dataclasses.field(default_factory=list)  # the model at each loss call
    # Rows of the policy's no-grad log-prob forwards from this step's phase 1 to its next one: the carried rows'
    # generating log-probs, then TRL's old log-probs in the scoring pass.
    no_grad_logps_rows: int = 0


def counting_no_grad_logps_rows(model, counts: list[int]):
    """Adds the rows of every no-grad log-prob forward of `model` (TRL's log-prob call passes `labels`; generation
    does not) to `counts[-1]`."""

    def count(module, args, kwargs):
        if "labels" in kwargs and not torch.is_grad_enabled():
            counts[-1] += kwargs["input_ids"].shape[0]

    return model.register_forward_pre_hook(count, with_kwargs=True)


def updates_per_generation_batch(layout: dict) -> int:
    """Optimizer updates per generation batch in a layout of `toy_config` overrides (TRL's defaults elsewhere)."""
    accumulation = layout.get("gradient_accumulation_steps", 1)
    generate_every = layout.get("steps_per_generation", accumulation) * layout.get("num_iterations", 1)
    return max(1, generate_every // accumulation)


def snapshot(shared_task, trainer) -> torch.nn.Module:
    # Weights loaded into a pristine copy: a deepcopy of the trainer's model would keep the forward wrapper that
    # accelerate installs, which still calls the live model.
    policy = copy.deepcopy(shared_task.model)
    policy.load_state_dict(trainer.model.state_dict())
    return policy


def carrying_run(shared_task, tmp_path, vllm: bool, **overrides):
    task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
    reward = HalfDegenerateReward(G)
    config = toy_config(
        DAPOConfig,
        tmp_path,
        max_steps=STEPS * updates_per_generation_batch(overrides),  # STEPS generation batches
        dynamic_sampling_carry_surplus=True,
        vllm_importance_sampling_mode="token_truncate",
        # Large enough that one optimizer step moves every log-prob far beyond ATOL on any CPU (at 1e-3 a step moved
        # them by as little as 7e-4 on some machines), so the checks below can tell the two policies apart.
        learning_rate=2e-2,
        **overrides,
    )
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[reward])
    if vllm:
        simulate_vllm(trainer)
    steps: list[Step] = []
    sample = trainer.dynamic_sampler.sample_batch
    compute_loss = trainer._compute_loss
    no_grad_rows = [0]
    counting_no_grad_logps_rows(trainer.model, no_grad_rows)

    def recording_sample(inputs, trl_generate_and_score):
        if steps:
            steps[-1].no_grad_logps_rows, no_grad_rows[-1] = no_grad_rows[-1], 0
        policy = snapshot(shared_task, trainer)
        batch = sample(inputs, trl_generate_and_score)
        carried = [(list(r.prompt_ids), list(r.completion_ids)) for group in trainer.dynamic_sampler.carried for r in group]
        steps.append(Step(policy=policy, carried_out=carried))
        return batch

    def recording_loss(model, inputs):
        steps[-1].loss_policies.append(snapshot(shared_task, trainer))
        # Recorded after the loss, as it used them: it fills fresh rows' old log-probs from its own forward.
        loss = compute_loss(model, inputs)
        steps[-1].loss_inputs.append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
        return loss

    trainer.dynamic_sampler.sample_batch = recording_sample
    trainer._compute_loss = recording_loss
    trainer.train()
    steps[-1].no_grad_logps_rows = no_grad_rows[-1]
    return trainer, steps, reward


def call_rows(call: dict):
    """(prompt ids, completion ids) of every row of one loss call."""
    for i in range(call["prompt_ids"].shape[0]):
        yield call["prompt_ids"][i][call["prompt_mask"][i].bool()].tolist(), call["completion_ids"][i][
            call["completion_mask"][i].bool()
        ].tolist()


def loss_rows(step: Step):
    """(prompt ids, completion ids, index in its loss call, loss call) of every row the loss received."""
    for call in step.loss_inputs:
        for i, (prompt, completion) in enumerate(call_rows(call)):
            yield prompt, completion, i, call


# "accumulation": a generation batch of 16 rows trained in two accumulation slices of 8 within one optimizer
# step (TRL computes no old log-probs there either); the loss sees carried and fresh rows spread over both slices.
# "updates": the same batch trained in four optimizer updates of 4 rows (steps_per_generation=4, where clip-higher
# acts; TRL computes old log-probs at scoring), "updates_vllm" the same with vLLM's importance-sampling correction,
# "iterations": a batch of two slices of 8 trained twice (num_iterations=2), four updates too.
MULTI_UPDATE = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "steps_per_generation": 4}
RUNS = {
    "plain": {"vllm": False},
    "vllm": {"vllm": True},
    "accumulation": {"vllm": False, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2},
    "updates": {"vllm": False, **MULTI_UPDATE},
    "updates_vllm": {"vllm": True, **MULTI_UPDATE},
    "iterations": {
        "vllm": False, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "steps_per_generation": 2,
        "num_iterations": 2,
    },
}


@pytest.fixture(scope="module", params=list(RUNS))
def carry_run(request, shared_task, tmp_path_factory):
    return carrying_run(shared_task, tmp_path_factory.mktemp("carry"), **RUNS[request.param])


def test_surplus_groups_are_trained_in_the_next_step_and_logged(carry_run):
    trainer, steps, reward = carry_run
    tokenizer = trainer.processing_class
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry]
    assert len(steps) == STEPS and len(logs) == STEPS
    assert trainer._variant_settings()["dynamic sampling carries surplus groups"] is True  # the model card says so
    updates = updates_per_generation_batch(vars(trainer.args))  # optimizer steps per generation batch
    assert sum(len(step.carried_out) for step in steps[:-1]) > 0, "the run must carry something to test"
    for t, step in enumerate(steps):
        carried_in = steps[t - 1].carried_out if t else []
        assert logs[t]["dynamic_sampling/carried_groups"] == len(carried_in) // G
        assert logs[t]["dynamic_sampling/kept_groups"] == BATCH_GROUPS  # carried ones included
        # Surplus = fresh informative groups beyond what the carried ones left to fill; at most one batch of it is
        # carried (all of it is trained next step), the rest is dropped and counted.
        found = round(logs[t]["dynamic_sampling/pass_rate"] * logs[t]["dynamic_sampling/generated_groups"])
        surplus = found - (BATCH_GROUPS - len(carried_in) // G)
        assert len(step.carried_out) // G == min(surplus, BATCH_GROUPS)
        assert logs[t]["dynamic_sampling/dropped_informative_groups"] == max(0, surplus - BATCH_GROUPS)
        trained = [(p, c) for p, c, _, _ in loss_rows(step)]
        assert len(trained) == BATCH_GROUPS * G * trainer.args.num_iterations
        for row in carried_in:
            assert row in trained
        # Carried rows were generated (and scored) at the previous step, and come from informative prompts.
        for prompt_ids, _ in carried_in:
            prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
            assert is_live_prompt(prompt)
            assert any(prompt in call["prompts"] for call in reward.calls if call["step"] == (t - 1) * updates)
    # Every informative group generated was trained, except the last step's carry and the counted drops.
    informative = sum(e["dynamic_sampling/pass_rate"] * e["dynamic_sampling/generated_groups"] for e in logs)
    dropped = sum(e["dynamic_sampling/dropped_informative_groups"] for e in logs)
    assert round(informative) == STEPS * BATCH_GROUPS + len(steps[-1].carried_out) // G + dropped


def test_carried_rows_old_logps_come_from_the_generating_policy(carry_run):
    _, steps, _ = carry_run
    checked = 0
    for t in range(1, len(steps)):
        generating, training = steps[t - 1].policy, steps[t].policy
        carried = steps[t - 1].carried_out
        for prompt, completion, i, call in loss_rows(steps[t]):
            old = call["old_per_token_logps"][i, : len(completion)]
            expected_current = completion_logps(training, prompt, completion)
            if (prompt, completion) not in carried:
                # Fresh rows: the current policy, so their ratio starts at 1 as in TRL.
                torch.testing.assert_close(old, expected_current, atol=ATOL, rtol=0)
                continue
            expected = completion_logps(generating, prompt, completion)
            torch.testing.assert_close(old, expected, atol=ATOL, rtol=0)
            # The step's update moved the policy, so this check can tell the two policies apart.
            assert (expected - expected_current).abs().max() > 100 * ATOL
            checked += 1
    assert checked > 0


def test_each_rows_old_logps_are_computed_once(carry_run):
    """The policy's no-grad log-prob forwards cover each trained row once: a carried row when it is carried (its
    generating log-probs), a fresh row in TRL's scoring pass where TRL computes old log-probs; the scoring pass does
    not run the policy over carried rows again."""
    trainer, steps, _ = carry_run
    batch_rows = BATCH_GROUPS * G
    scores = trl_computes_old_logps(trainer)
    assert scores == (updates_per_generation_batch(vars(trainer.args)) > 1 or trainer.use_vllm)
    for t, step in enumerate(steps):
        carried_in = len(steps[t - 1].carried_out) if t else 0
        assert step.no_grad_logps_rows == len(step.carried_out) + (batch_rows - carried_in if scores else 0), t
    # Over the run: no more no-grad log-prob rows than rows trained, but for the last batch's carry, which a longer
    # run would train next.
    recorded_untrained = len(steps[-1].carried_out)
    assert sum(step.no_grad_logps_rows for step in steps) - recorded_untrained <= len(steps) * batch_rows
    assert sum(len(step.carried_out) for step in steps[:-1]) > 0


@pytest.mark.parametrize("run", ["iterations", "updates_vllm"])
def test_scoring_without_the_carried_rows_trains_as_scoring_them_and_replacing_them(
    shared_task, tmp_path, run, monkeypatch
):
    """Skipping the carried rows in TRL's scoring pass changes no loss or metric: against a run whose scoring pass
    computes every row's old log-probs and then replaces the carried rows' (the behaviour before the skip), the logs
    agree (to float rounding: the fresh rows go through the forward in other chunks) while fewer rows are scored."""
    skipping_trainer, skipping_steps, _ = carrying_run(shared_task, tmp_path / "skipping", **RUNS[run])
    monkeypatch.setattr(trl_hooks, "rows_to_score", lambda carried, per_process, chunk: list(range(len(carried))))
    scoring_trainer, scoring_steps, _ = carrying_run(shared_task, tmp_path / "scoring", **RUNS[run])
    carried_in = sum(len(step.carried_out) for step in skipping_steps[:-1])
    assert carried_in > 0
    rows = [sum(step.no_grad_logps_rows for step in steps) for steps in (skipping_steps, scoring_steps)]
    assert rows[1] - rows[0] == carried_in
    print(f"{run}: no-grad log-prob rows {rows[1]} -> {rows[0]} for {len(skipping_steps) * BATCH_GROUPS * G} trained")
    logs = [[entry for entry in t.state.log_history if "loss" in entry] for t in (skipping_trainer, scoring_trainer)]
    assert len(logs[0]) == len(logs[1]) > 0
    for skipping, scoring in zip(*logs, strict=True):
        timed = {key for key in scoring if "time" in key or "per_second" in key}
        assert skipping.keys() == scoring.keys()
        assert {k: v for k, v in skipping.items() if k not in timed} == pytest.approx(
            {k: v for k, v in scoring.items() if k not in timed}, rel=1e-4, abs=1e-6
        )


def test_carried_rows_importance_sampling_uses_the_generating_policy(shared_task, carry_run):
    trainer, steps, _ = carry_run
    if not trainer.use_vllm:
        # Without vLLM, TRL's loss must get no importance-sampling ratio, carried rows or not.
        assert all("importance_sampling_ratio" not in call for step in steps for call in step.loss_inputs)
        return
    checked = 0
    for t in range(1, len(steps)):
        generating, training = steps[t - 1].policy, steps[t].policy
        for prompt, completion, i, call in loss_rows(steps[t]):
            if (prompt, completion) not in steps[t - 1].carried_out:
                continue
            sampling = call["sampling_per_token_logps"][i, : len(completion)]
            # The replayed sampling log-probs are those vLLM returned at generation, under the generating policy.
            torch.testing.assert_close(sampling, completion_logps(generating, prompt, completion) - SAMPLING_OFFSET)
            ratio = call["importance_sampling_ratio"][i, : len(completion)]
            expected = torch.exp(completion_logps(generating, prompt, completion) - sampling).clamp(max=3.0)
            torch.testing.assert_close(ratio, expected, atol=ATOL, rtol=ATOL)
            wrong = torch.exp(completion_logps(training, prompt, completion) - sampling).clamp(max=3.0)
            assert (wrong - expected).abs().max() > 100 * ATOL
            checked += 1
    assert checked > 0


def test_carried_rows_policy_ratio_is_logged_per_optimizer_step(carry_run):
    """`dynamic_sampling/carried_ratio_mean` and `_max` are the per-token ratio of the policy each update trains
    to the generating policy, over the carried rows' tokens of that update, computed here from snapshots."""
    trainer, steps, _ = carry_run
    accumulation = trainer.args.gradient_accumulation_steps
    logged = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    expected: dict[int, list[torch.Tensor]] = {}
    calls_before = 0
    for t, step in enumerate(steps):
        carried_in = steps[t - 1].carried_out if t else []
        for number, (call, policy) in enumerate(zip(step.loss_inputs, step.loss_policies, strict=True)):
            ratios = expected.setdefault((calls_before + number) // accumulation + 1, [])
            for prompt, completion in call_rows(call):
                if (prompt, completion) in carried_in:
                    generating = completion_logps(steps[t - 1].policy, prompt, completion)
                    ratios.append(torch.exp(completion_logps(policy, prompt, completion) - generating))
        calls_before += len(step.loss_inputs)
    assert sorted(expected) == sorted(logged)
    moved = 0
    for update, ratios in expected.items():
        if not ratios:
            assert "dynamic_sampling/carried_ratio_mean" not in logged[update]
            continue
        ratios = torch.cat(ratios)
        assert logged[update]["dynamic_sampling/carried_ratio_mean"] == pytest.approx(ratios.mean().item(), rel=1e-4)
        assert logged[update]["dynamic_sampling/carried_ratio_max"] == pytest.approx(ratios.max().item(), rel=1e-4)
        moved += (ratios - 1).abs().max().item() > 1e-3
    assert moved > 0, "carried rows' ratio must move away from 1 for this check to mean anything"


def test_carry_off_drops_surplus_and_logs_it(shared_task, tmp_path):
    task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
    config = toy_config(DAPOConfig, tmp_path, max_steps=3, **DAPO_AS_PUBLISHED)
    trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry]
    assert all("dynamic_sampling/carried_groups" not in entry for entry in logs)
    assert trainer._variant_settings()["dynamic sampling carries surplus groups"] is False
    assert trainer.dynamic_sampler.carried == []
    for entry in logs:
        informative = round(entry["dynamic_sampling/pass_rate"] * entry["dynamic_sampling/generated_groups"])
        assert entry["dynamic_sampling/dropped_informative_groups"] == informative - BATCH_GROUPS
    assert sum(entry["dynamic_sampling/dropped_informative_groups"] for entry in logs) > 0


# Two processes (CPU, gloo), launched with torchrun: tests/dynamic_sampling/scripts/two_process_carry.py.

TWO_PROCESS_SCRIPT = Path(__file__).resolve().parent / "scripts" / "two_process_carry.py"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=[1, 4], ids=["one-update-per-batch", "four-updates-per-batch"])
def two_process_carry(request, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("two_process_carry")
    command = two_process_command(TWO_PROCESS_SCRIPT, "--out", out_dir, "--steps_per_generation", request.param)
    run_launch(command, {**os.environ, "ACCELERATE_USE_CPU": "1"}, timeout_s=180)
    return request.param, [json.loads((out_dir / f"carry_rank{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.multiprocess
def test_two_processes_agree_on_carrying_and_use_the_generating_policy(two_process_carry):
    updates, two_process_carry = two_process_carry
    first, second = two_process_carry
    assert first["global_step"] == second["global_step"] == 4 * updates
    assert first["logs"] == second["logs"]
    # The carried rows' ratio is gathered once per optimizer step that trains them, on both ranks alike.
    assert first["ratio_logs"] == second["ratio_logs"]
    assert any(entry for entry in first["ratio_logs"])
    for step_first, step_second in zip(first["steps"], second["steps"], strict=True):
        # Each rank trains its usual 8 rows.
        assert step_first["loss_rows"] == step_second["loss_rows"] == 8
    for t in range(1, 4):
        carried = first["steps"][t - 1]["carried_out"]
        assert second["steps"][t - 1]["carried_out"] == carried, "every rank holds every carried row"
        assert first["logs"][t]["dynamic_sampling/carried_groups"] == len(carried) // G
        # Carried groups open the next batch, laid out over the ranks in order.
        assert (first["steps"][t]["batch"] + second["steps"][t]["batch"])[: len(carried)] == carried
    # Both ranks make the same no-grad log-prob forwards (collectives under ZeRO-3 or FSDP); with several updates per
    # batch, TRL's scoring pass computes old log-probs and skips carried rows where the forward counts allow.
    assert first["no_grad_logps_forwards"]["calls"] == second["no_grad_logps_forwards"]["calls"]
    # Recording the generating log-probs: each rank scores half the carried rows, rounded up.
    recorded = sum(2 * -(-len(first["steps"][t]["carried_out"]) // 2) for t in range(4))
    no_grad_rows = sum(rank["no_grad_logps_forwards"]["rows"] for rank in two_process_carry)
    if updates == 1:  # TRL computes no old log-probs
        assert no_grad_rows == recorded
    else:  # in chunks of 2 rows, a rank holding carried rows skips at least one of its 8
        assert recorded < no_grad_rows < recorded + 4 * 16
    checked = sum(len(rank["steps"][t]["carried_error"]) for rank in two_process_carry for t in range(4))
    assert checked > 0 and any(rank["steps"][t]["carried_error"] for rank in [second] for t in range(4))
    for rank in two_process_carry:
        for step in rank["steps"]:
            assert all(error < ATOL for error in step["carried_error"] + step["fresh_error"])


@pytest.mark.parametrize("skipping", [False, True], ids=["carrying", "carrying+posterior-skipping"])
@pytest.mark.slow
def test_resume_while_groups_are_carried_logs_the_uninterrupted_losses(shared_task, tmp_path, skipping):
    """The checkpoint at step 2 is taken while groups are carried into step 3; the resumed run trains them and logs
    exactly the losses and metrics of the uninterrupted run (same process kind, so equality is exact), with the
    posterior skip predictor's history restored too."""

    def run(output_dir, resume_from=None):
        task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
        config = toy_config(
            DAPOConfig, output_dir, max_steps=4, save_strategy="steps", save_steps=2,
            dynamic_sampling_carry_surplus=True, skip_degenerate_prompts=skipping, skip_predictor="posterior",
        )  # fmt: skip
        trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
        trainer.train(resume_from_checkpoint=resume_from)
        return [entry for entry in trainer.state.log_history if "dynamic_sampling/pass_rate" in entry]

    first = run(tmp_path / "first")
    assert first[2]["dynamic_sampling/carried_groups"] > 0, "the uninterrupted run must carry into step 3"
    checkpoint = tmp_path / "first" / "checkpoint-2"
    assert checkpoint_problems(str(checkpoint)) == []
    resumed = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert [entry["step"] for entry in resumed] == [1, 2, 3, 4]
    for uninterrupted, after_resume in zip(first[2:], resumed[2:], strict=True):
        assert after_resume["loss"] == uninterrupted["loss"]
        for key in ("carried_groups", "kept_groups", "generated_groups", "pass_rate"):
            assert after_resume[f"dynamic_sampling/{key}"] == uninterrupted[f"dynamic_sampling/{key}"]
        if skipping:
            assert after_resume["dynamic_sampling/skipped_prompts"] == uninterrupted["dynamic_sampling/skipped_prompts"]
    if skipping:
        assert sum(entry["dynamic_sampling/skipped_prompts"] for entry in first) > 0, "the run must skip prompts"

    # A carrying run's checkpoint without its carried groups is incomplete, so a resume never picks it.
    (checkpoint / CARRIED_FILE).unlink()
    assert checkpoint_problems(str(checkpoint)) == [f"{CARRIED_FILE} is missing although {MANIFEST_FILE} lists it"]


def test_resume_while_groups_are_carried_over_several_updates_per_batch_logs_the_uninterrupted_run(
    shared_task, tmp_path
):
    """As above, in the layout where a generation batch trains four optimizer updates (`steps_per_generation=4`):
    the checkpoint at step 4, a generation-batch boundary, is taken while groups are carried into the batch of
    steps 5-8; the resumed run logs exactly what the uninterrupted run logs at every later step, the carried rows'
    policy ratio included. (TRL keeps no record of its place inside a generation batch, so only a checkpoint at a
    boundary resumes the uninterrupted run exactly, with or without carrying.)"""

    def run(output_dir, resume_from=None):
        task = dataclasses.replace(shared_task, model=copy.deepcopy(shared_task.model))
        config = toy_config(
            DAPOConfig, output_dir, **MULTI_UPDATE, max_steps=12, save_strategy="steps", save_steps=4,
            dynamic_sampling_carry_surplus=True,
        )  # fmt: skip
        trainer = toy_trainer(DAPOTrainer, config, task, reward_funcs=[HalfDegenerateReward(G)])
        trainer.train(resume_from_checkpoint=resume_from)
        return {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}

    first = run(tmp_path / "first")
    assert first[5]["dynamic_sampling/carried_groups"] > 0, "the uninterrupted run must carry into step 5"
    assert any("dynamic_sampling/carried_ratio_mean" in first[step] for step in range(5, 9))
    checkpoint = tmp_path / "first" / "checkpoint-4"
    assert checkpoint_problems(str(checkpoint)) == []
    resumed = run(tmp_path / "resumed", resume_from=str(checkpoint))
    assert sorted(resumed) == list(range(1, 13))  # the checkpoint's history, then the resumed run's
    for step in range(5, 13):
        after_resume = resumed[step]
        timed = {key for key in after_resume if "time" in key or "per_second" in key}
        assert {k: v for k, v in after_resume.items() if k not in timed} == {
            k: v for k, v in first[step].items() if k not in timed
        }, step
