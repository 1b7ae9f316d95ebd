"""The real-model study's runner at a tiny size on SmolLM2: a run stopped at its deadline and started again resumes
from its checkpoint and records exactly what an uninterrupted run records, and the grid's shared step-0 evaluation is
the measurement a run's own trainer would have made."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks.real_model_study.task import canonical_form
from tests.test_benchmarks_smoke import REPO

pytestmark = pytest.mark.real_model

COMPARED = ("eval_steps", "accuracy", "eval_per_prompt", "eval_tokens", "eval_completions", "eval_mean_length",
            "logged", "probe", "train_questions", "complete")


def study(*args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "benchmarks.real_model_study.study", *args, "--smoke"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_a_run_stopped_at_its_deadline_resumes_to_the_uninterrupted_record(smollm2_path, tmp_path):
    interrupted, whole = tmp_path / "interrupted", tmp_path / "whole"
    run = ["run", "--arm", "grpo", "--seed", "1"]
    assert "complete=False" in study(*run, "--runs_dir", str(interrupted), "--deadline_unix", str(time.time()))
    stopped = json.loads((interrupted / "grpo-seed1.json").read_text())
    assert stopped["eval_steps"] == [0, 1] and stopped["stopped_at_deadline"]
    assert (interrupted / "checkpoints" / "grpo-seed1" / "checkpoint-1").is_dir()
    assert "complete=True" in study(*run, "--runs_dir", str(interrupted))
    assert "complete=True" in study(*run, "--runs_dir", str(whole))
    resumed = json.loads((interrupted / "grpo-seed1.json").read_text())
    uninterrupted = json.loads((whole / "grpo-seed1.json").read_text())
    assert {key: resumed[key] for key in COMPARED} == {key: uninterrupted[key] for key in COMPARED}
    assert [attempt["resumed_from_step"] for attempt in resumed["attempts"]] == [0, 1]
    assert not (interrupted / "checkpoints" / "grpo-seed1").exists()  # a complete run keeps no checkpoint
    # No training problem is a held-out problem or a reordering of one.
    held_out = json.loads((whole / "step0.json").read_text())["held_out_questions"]
    held_out_forms = {canonical_form(question.removeprefix("Calculate ").removesuffix(".")) for question in held_out}
    assert len(held_out_forms) == len(held_out) == 4
    assert not {tuple(map(tuple, form)) for form in resumed["train_forms"]} & held_out_forms
    assert len(resumed["train_forms"]) == 2


def test_the_shared_step0_evaluation_is_what_a_runs_trainer_would_measure(smollm2_path, tmp_path):
    import torch

    from benchmarks.real_model.real_model_benchmark import shared_config
    from benchmarks.real_model.real_model_recorder import EVAL_SEED_BASE
    from benchmarks.real_model_study import study
    from trl_variants.real.evaluation import sampled_pass_rate
    from trl_variants.real.smollm2 import load_smollm2

    settings = study.Settings(held_out_prompts=6, max_completion_length=24)
    threads = torch.get_num_threads()
    try:
        shared = study.step0(settings, str(tmp_path))["pass_rate"]
        model, tokenizer = load_smollm2()
        held_out, train, _ = study.build_task(settings, seed=0)
        trainer_class, config = study.arm_trainer_and_config(
            "defaults", str(tmp_path / "out"), shared_config(settings, 0, checkpoint=False))
        trainer = trainer_class(model, [train.reward_func], args=config, train_dataset=train.dataset,
                                processing_class=tokenizer)
        measured = sampled_pass_rate(trainer.model, tokenizer, held_out, samples_per_prompt=1, max_new_tokens=24,
                                     batch_size=64, seed=EVAL_SEED_BASE)
    finally:
        torch.set_num_threads(threads)
    assert measured.per_prompt == shared["per_prompt"]
    assert measured.mean_completion_tokens == shared["mean_completion_tokens"]
    assert shared["prompts"] == 6 and len(shared["per_prompt"]) == 6
