"""The trainers' losses and gradients against the papers' objectives, on fixed per-token log-probs.

Each test builds a real trainer on the toy task and calls its `_compute_loss` on a hand-made batch; only the policy
forward pass is replaced, by fixed log-probs, so that value and gradient can be compared with the formulas in
`ref_formulas` (float64 numpy, gradients derived by hand).
"""

import copy

import numpy as np
import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from . import ref_formulas as ref
from .helpers import toy_config
from .ref_setup import (
    LossBatch,
    fresh_toy_task,
    loss_and_grad_at,
    loss_and_logp_grad,
    loss_trainer,
    random_loss_batch,
    saved_policy,
)

ROWS, WIDTH = 8, 6  # WIDTH is also max_completion_length, as in a batch where the longest completion hit it


@pytest.fixture(scope="module")
def task():
    return fresh_toy_task()


@pytest.fixture(scope="module")
def batch(task):
    return random_loss_batch(task.tokenizer, ROWS, WIDTH, seed=1)


def assert_matches(actual_loss, actual_grad, expected_loss, expected_grad):
    np.testing.assert_allclose(actual_loss, expected_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(actual_grad, expected_grad, rtol=1e-4, atol=1e-8)


def test_fixture_batch_separates_the_three_aggregations(batch):
    """The comparisons below only discriminate if the three objectives differ on this batch and clipping acts."""
    args = (batch.logps, batch.old_logps, batch.advantages, batch.mask)
    values = [
        ref.grpo_loss(*args, epsilon=0.2)[0],
        ref.dapo_loss(*args, epsilon_low=0.2, epsilon_high=0.28)[0],
        ref.dr_grpo_loss(*args, epsilon=0.2, max_completion_length=WIDTH)[0],
    ]
    assert min(abs(a - b) for i, a in enumerate(values) for b in values[i + 1 :]) > 1e-3
    ratio = np.exp(batch.logps - batch.old_logps)[batch.mask == 1]
    assert (ratio > 1.28).any() and (ratio < 0.8).any() and ((ratio > 1.2) & (ratio < 1.28)).any()
    assert len(set(batch.mask.sum(axis=1))) > 2


def test_grpo_loss_is_sequence_mean_of_token_means_with_symmetric_clip(task, batch, tmp_path):
    trainer = loss_trainer(GRPOTrainer, GRPOConfig, tmp_path, task, loss_type="grpo", epsilon=0.2)
    loss, grad = loss_and_logp_grad(trainer, batch)
    expected = ref.grpo_loss(batch.logps, batch.old_logps, batch.advantages, batch.mask, epsilon=0.2)
    assert_matches(loss, grad, *expected)


def test_dapo_loss_is_token_mean_over_batch_with_asymmetric_clip(task, batch, tmp_path):
    trainer = loss_trainer(DAPOTrainer, DAPOConfig, tmp_path, task, per_device_train_batch_size=ROWS)
    assert (trainer.epsilon_low, trainer.epsilon_high) == (0.2, 0.28)
    loss, grad = loss_and_logp_grad(trainer, batch)
    expected = ref.dapo_loss(
        batch.logps, batch.old_logps, batch.advantages, batch.mask, epsilon_low=0.2, epsilon_high=0.28
    )
    assert_matches(loss, grad, *expected)


def test_dapo_micro_batch_is_normalised_by_the_whole_generation_batch(task, tmp_path):
    """With two accumulation steps per generation batch, each micro-batch's token sum is divided by the token
    count of the whole generation batch (`num_items_in_batch`), so the two halves add up to DAPO's objective."""
    whole = random_loss_batch(task.tokenizer, 2 * ROWS, WIDTH, seed=2)
    trainer = loss_trainer(
        DAPOTrainer, DAPOConfig, tmp_path, task, per_device_train_batch_size=ROWS, gradient_accumulation_steps=2
    )
    assert trainer.args.steps_per_generation == 2
    total_loss = 0.0
    for start in (0, ROWS):
        half = whole.rows(start, start + ROWS)
        loss, grad = loss_and_logp_grad(trainer, half)
        expected = ref.dapo_loss(
            half.logps, half.old_logps, half.advantages, half.mask, 0.2, 0.28, total_tokens=whole.mask.sum()
        )
        assert_matches(loss, grad, *expected)
        total_loss += loss
    whole_objective = ref.dapo_loss(whole.logps, whole.old_logps, whole.advantages, whole.mask, 0.2, 0.28)[0]
    np.testing.assert_allclose(total_loss, whole_objective, rtol=1e-5)


def test_dr_grpo_loss_is_token_sum_over_constant_normaliser(task, batch, tmp_path):
    trainer = loss_trainer(DrGRPOTrainer, DrGRPOConfig, tmp_path, task, per_device_train_batch_size=ROWS)
    loss, grad = loss_and_logp_grad(trainer, batch)
    expected = ref.dr_grpo_loss(
        batch.logps, batch.old_logps, batch.advantages, batch.mask, epsilon=0.2, max_completion_length=WIDTH
    )
    assert_matches(loss, grad, *expected)


def test_dr_grpo_normaliser_is_max_completion_length_not_batch_width(task, batch, tmp_path):
    """A batch whose longest completion is shorter than max_completion_length keeps the same constant."""
    trainer = loss_trainer(
        DrGRPOTrainer, DrGRPOConfig, tmp_path, task, per_device_train_batch_size=ROWS, max_completion_length=10
    )
    loss, grad = loss_and_logp_grad(trainer, batch)
    expected = ref.dr_grpo_loss(batch.logps, batch.old_logps, batch.advantages, batch.mask, 0.2, 10)
    assert_matches(loss, grad, *expected)


@pytest.fixture(scope="module")
def saved_model_path(task, tmp_path_factory):
    return saved_policy(task, tmp_path_factory.mktemp("toy-model"))


KL_CASES = {
    "grpo": (GRPOTrainer, GRPOConfig, {"loss_type": "grpo"}),
    "dapo": (DAPOTrainer, DAPOConfig, {}),
    "dr_grpo": (DrGRPOTrainer, DrGRPOConfig, {}),
}


def reference_loss(variant, batch, **kl):
    args = (batch.logps, batch.old_logps, batch.advantages, batch.mask)
    if variant == "grpo":
        return ref.grpo_loss(*args, 0.2, **kl)
    if variant == "dapo":
        return ref.dapo_loss(*args, 0.2, 0.28, **kl)
    return ref.dr_grpo_loss(*args, 0.2, WIDTH, **kl)


@pytest.mark.parametrize("variant", KL_CASES)
def test_k3_kl_term_adds_beta_times_non_negative_k3(variant, task, batch, saved_model_path, tmp_path):
    """The papers' KL term: beta * K3 per token, aggregated like the policy term. TRL multiplies K3 by the
    importance ratio unless `use_bias_correction_kl=False`; this checks the paper's form."""
    trainer_class, config_class, overrides = KL_CASES[variant]
    beta = 0.04
    trainer = loss_trainer(
        trainer_class, config_class, tmp_path, task, model=saved_model_path, beta=beta,
        use_bias_correction_kl=False, per_device_train_batch_size=ROWS, **overrides,
    )
    assert trainer.beta == beta
    loss, grad = loss_and_logp_grad(trainer, batch)
    assert_matches(loss, grad, *reference_loss(variant, batch, beta=beta, ref_logps=batch.ref_logps))

    per_token_kl, _ = ref.k3_kl(batch.logps, batch.ref_logps)
    assert (per_token_kl >= 0).all()
    assert loss - reference_loss(variant, batch)[0] > 0  # the KL term only ever adds to the loss
    # TRL logs the mask-weighted mean of the per-token K3 values it used.
    logged_kl = trainer._metrics["train"]["kl"][-1]
    np.testing.assert_allclose(logged_kl, (per_token_kl * batch.mask).sum() / batch.mask.sum(), rtol=1e-5)


@pytest.mark.parametrize("variant", ["dapo", "dr_grpo"])
def test_default_kl_is_importance_weighted_k3(variant, task, batch, saved_model_path, tmp_path):
    """With the configs' default `use_bias_correction_kl=True` (inherited from TRL) the KL term is r * K3: the
    same value on-policy, a different gradient. Pinned so that a change of default is noticed."""
    trainer_class, config_class, overrides = KL_CASES[variant]
    trainer = loss_trainer(
        trainer_class, config_class, tmp_path, task, model=saved_model_path, beta=0.04,
        per_device_train_batch_size=ROWS, **overrides,
    )
    assert trainer.args.use_bias_correction_kl is True
    loss, grad = loss_and_logp_grad(trainer, batch)
    kl = {"beta": 0.04, "ref_logps": batch.ref_logps, "kl_importance_weighted": True}
    assert_matches(loss, grad, *reference_loss(variant, batch, **kl))


def test_k3_is_zero_when_policy_equals_reference(task, saved_model_path, tmp_path):
    batch = random_loss_batch(task.tokenizer, ROWS, WIDTH, seed=3)
    batch.inputs["ref_per_token_logps"] = torch.tensor(batch.logps, dtype=torch.float32)
    trainer = loss_trainer(
        DAPOTrainer, DAPOConfig, tmp_path, task, model=saved_model_path, beta=0.5, per_device_train_batch_size=ROWS
    )
    loss, grad = loss_and_logp_grad(trainer, batch)
    expected = ref.dapo_loss(batch.logps, batch.old_logps, batch.advantages, batch.mask, 0.2, 0.28)
    assert_matches(loss, grad, *expected)
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx(0.0, abs=1e-7)


def clip_probe_batch(tokenizer, ratios, advantages) -> LossBatch:
    """One single-token completion per ratio, with old log-prob log(0.4) and new log-prob log(0.4 * ratio)."""
    rows = len(ratios)
    prompt_ids = torch.tensor(tokenizer(["1+2="] * rows, add_special_tokens=False)["input_ids"])
    old = np.full((rows, 1), np.log(0.4), dtype=np.float32)
    new = np.log(0.4 * np.asarray(ratios, dtype=np.float64)).astype(np.float32)[:, None]
    mask = np.ones((rows, 1), dtype=np.int64)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": torch.full((rows, 1), tokenizer.convert_tokens_to_ids("3")),
        "completion_mask": torch.tensor(mask),
        "advantages": torch.tensor(advantages, dtype=torch.float32),
        "old_per_token_logps": torch.tensor(old),
        "num_items_in_batch": torch.tensor(rows),
    }
    as_float64 = old.astype(np.float64)
    return LossBatch(
        inputs, new.astype(np.float64), as_float64, as_float64, np.asarray(advantages, np.float64), mask.astype(float)
    )


@pytest.mark.parametrize(("epsilon_high", "gets_gradient"), [(0.28, True), (0.2, False)])
def test_clip_higher_lets_ratio_1_25_with_positive_advantage_learn(epsilon_high, gets_gradient, task, tmp_path):
    # Row 0 is the probe: ratio 1.25, advantage +1. Row 1 (ratio 1.1) is inside both ranges and always learns.
    probe = clip_probe_batch(task.tokenizer, ratios=[1.25, 1.1], advantages=[1.0, 1.0])
    np.testing.assert_allclose(np.exp(probe.logps - probe.old_logps).ravel(), [1.25, 1.1], rtol=1e-6)
    trainer = loss_trainer(
        DAPOTrainer, DAPOConfig, tmp_path, task, epsilon=0.2, epsilon_high=epsilon_high,
        per_device_train_batch_size=2, num_generations=2,
    )
    _, grad = loss_and_logp_grad(trainer, probe)
    # d(-r A / N) / d log pi = -r A / N with N = 2 tokens.
    assert grad[1, 0] == pytest.approx(-1.1 / 2, rel=1e-5)
    if gets_gradient:
        assert grad[0, 0] == pytest.approx(-1.25 / 2, rel=1e-5)
    else:
        assert grad[0, 0] == 0.0


class GradientCapture(TrainerCallback):
    """Copies the accumulated gradients just before the optimiser step (clipping is off in these runs)."""

    def __init__(self, model):
        self.model, self.grads = model, None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        named = self.model.named_parameters()
        self.grads = {name: p.grad.detach().clone() for name, p in named if p.grad is not None}


def fixed_generation_batch(task, rows=8, width=WIDTH, seed=4):
    """A scored generation batch in the layout `_generate_and_score_completions` returns, with old log-probs a
    little off the current policy so that clipping acts on some tokens."""
    batch = random_loss_batch(task.tokenizer, rows, width, seed=seed)
    inputs = dict(batch.inputs)
    del inputs["ref_per_token_logps"]
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logits = task.model(input_ids=ids, attention_mask=attention).logits[:, -width - 1 : -1]
        current = torch.log_softmax(logits.float(), dim=-1).gather(-1, inputs["completion_ids"].unsqueeze(-1))
    noise = torch.from_numpy(np.random.default_rng(seed).uniform(-0.3, 0.3, size=(rows, width))).float()
    inputs["old_per_token_logps"] = current.squeeze(-1) + noise
    return inputs


def accumulated_gradient(trainer_class, config_class, task, generation_batch, output_dir, batch_size, accumulation):
    model = copy.deepcopy(task.model)
    config = toy_config(
        config_class, output_dir, per_device_train_batch_size=batch_size, gradient_accumulation_steps=accumulation,
        max_steps=1, max_grad_norm=0.0, **({"dynamic_sampling": False} if config_class is DAPOConfig else {}),
    )
    capture = GradientCapture(model)
    trainer = trainer_class(
        model, task.reward_funcs, args=config, train_dataset=task.train_dataset, processing_class=task.tokenizer,
        callbacks=[capture],
    )
    # The generation step is replaced by the fixed batch so both splits see identical completions; everything
    # after it (shuffle, split into micro-batches, loss scaling, backward, accumulation) is TRL's training loop.
    trainer._generate_and_score_completions = lambda inputs: {k: v.clone() for k, v in generation_batch.items()}
    trainer.train()
    assert trainer._step == accumulation
    return capture.grads


@pytest.mark.parametrize(
    ("trainer_class", "config_class"), [(DAPOTrainer, DAPOConfig), (DrGRPOTrainer, DrGRPOConfig)]
)
def test_gradient_accumulation_split_gives_the_same_gradient(trainer_class, config_class, task, tmp_path):
    generation_batch = fixed_generation_batch(task)
    one_step = accumulated_gradient(trainer_class, config_class, task, generation_batch, tmp_path / "a", 8, 1)
    two_steps = accumulated_gradient(trainer_class, config_class, task, generation_batch, tmp_path / "b", 4, 2)
    assert one_step.keys() == two_steps.keys() and len(one_step) > 0
    assert sum(g.abs().sum() for g in one_step.values()) > 0
    for name in one_step:
        torch.testing.assert_close(two_steps[name], one_step[name], rtol=1e-4, atol=1e-7, msg=name)


def scored_batch_with_truncations(task, tmp_path, mask_truncated_completions):
    """One real generation batch where some completions stop with EOS and others hit max_completion_length.
    EOS is favoured at generation time so that both kinds occur with an untrained policy."""
    eos = task.tokenizer.eos_token_id
    trainer = loss_trainer(
        DAPOTrainer, DAPOConfig, tmp_path, task, model=copy.deepcopy(task.model), dynamic_sampling=False,
        max_completion_length=3, mask_truncated_completions=mask_truncated_completions,
        generation_kwargs={"sequence_bias": [[[eos], 2.0]]},
    )
    rows = [task.train_dataset[i] for i in range(4) for _ in range(trainer.num_generations)]
    torch.manual_seed(0)
    return trainer, trainer._generate_and_score_completions(rows)


def test_overlong_filtering_gives_truncated_completions_zero_gradient(task, tmp_path):
    filtering, filtered = scored_batch_with_truncations(task, tmp_path / "on", True)
    plain, unfiltered = scored_batch_with_truncations(task, tmp_path / "off", False)
    assert torch.equal(filtered["completion_ids"], unfiltered["completion_ids"])

    # Without filtering the mask covers each whole completion; a completion is truncated when its last token
    # is neither EOS nor padding (TRL's own rule).
    lengths = unfiltered["completion_mask"].sum(dim=1)
    last_tokens = unfiltered["completion_ids"].gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
    stop_tokens = torch.tensor([task.tokenizer.eos_token_id, task.tokenizer.pad_token_id])
    truncated = ~torch.isin(last_tokens, stop_tokens)
    assert 2 <= int(truncated.sum()) <= len(truncated) - 2, "the check needs both truncated and finished rows"
    assert (filtered["completion_mask"][truncated] == 0).all()
    assert torch.equal(filtered["completion_mask"][~truncated], unfiltered["completion_mask"][~truncated])

    logps = np.random.default_rng(5).uniform(-3.0, -0.1, size=filtered["completion_ids"].shape)
    grads = {}
    for name, trainer, inputs in [("on", filtering, filtered), ("off", plain, unfiltered)]:
        # Every row gets a positive advantage so that any row left in the loss would receive gradient.
        inputs = {**inputs, "advantages": torch.ones(len(truncated))}
        grads[name] = loss_and_grad_at(trainer, inputs, logps)[1]
    assert (grads["on"][truncated.numpy()] == 0).all()
    assert (grads["on"][~truncated.numpy()].sum(axis=1) < 0).all()
    assert (grads["off"][truncated.numpy()].sum(axis=1) < 0).all()
