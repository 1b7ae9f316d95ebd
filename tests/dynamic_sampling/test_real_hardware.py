"""`DAPOTrainer` with its defaults (dynamic sampling, carrying) trains wherever `GRPOTrainer` does: architectures
whose config has no attention shape (Mamba, Falcon-Mamba) or a per-layer one (Gemma 4), a float32 model under bf16
autocast, and devices without float64 (no float64 tensor is put on the accelerator).

The models are built tiny from their configs on the toy task's character vocabulary; the reward makes half the
groups informative (`HalfDegenerateReward`), so dynamic sampling runs refill rounds."""

import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import AutoConfig, AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer

from ..helpers import toy_config, toy_trainer
from .scripts.rewards import HalfDegenerateReward

G = 4


def tiny_model(model_type: str, vocab_size: int):
    """A randomly initialised causal LM of `model_type`, a few thousand parameters wide."""
    sizes = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16)  # fmt: skip
    if model_type in ("mamba", "falcon_mamba"):
        sizes = dict(vocab_size=vocab_size, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4)
    if model_type == "gemma4_text":
        sizes.update(layer_types=["sliding_attention", "full_attention"], sliding_window=16, hidden_size_per_layer_input=8,
                     vocab_size_per_layer_input=vocab_size, global_head_dim=16, per_layer_config=None)  # fmt: skip
    config = AutoConfig.for_model(model_type, **sizes)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def one_step(trainer_class, config_class, task, model, tmp_path, **overrides):
    config = toy_config(config_class, tmp_path, per_device_train_batch_size=8, num_generations=G, max_steps=1,
                        **overrides)  # fmt: skip
    task.model = model
    trainer = toy_trainer(trainer_class, config, task, reward_funcs=[HalfDegenerateReward(G)])
    trainer.train()
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba", "gemma4_text"])
def test_dapo_trains_a_step_with_its_defaults_where_grpo_trainer_does(shared_task, tmp_path, model_type):
    vocab = len(shared_task.tokenizer)
    one_step(GRPOTrainer, GRPOConfig, shared_task, tiny_model(model_type, vocab), tmp_path / "grpo")
    trainer = one_step(DAPOTrainer, DAPOConfig, shared_task, tiny_model(model_type, vocab), tmp_path / "dapo")
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    assert len(logged) == 1 and logged[0]["dynamic_sampling/rounds"] >= 1
    assert torch.isfinite(torch.tensor(logged[0]["loss"]))


def test_planning_a_round_reads_nothing_of_the_model(shared_task, tmp_path):
    """The plan comes from measured calls and the device's readings only, never from the model or its config (whose
    attention shape Mamba lacks and Gemma 4 sets per layer): planning with a model whose every attribute raises still
    plans or declines (here: declines, a CPU has no readings), for every architecture alike."""

    class Unreadable:
        def __getattr__(self, name):
            raise AssertionError(f"the plan read model.{name}")

    trainer = one_step(DAPOTrainer, DAPOConfig, shared_task, shared_task.model, tmp_path)
    trainer.model, batch_rows = Unreadable(), trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    try:
        assert trainer.dynamic_sampler.calls.round_rows_per_call([[1, 2, 3]] * 8, G) == batch_rows
    finally:
        trainer.model = shared_task.model


class Float64OnDevice(TorchFunctionMode):
    """Records every float64 tensor that code under `package` creates on, or moves to, `device`: a torch function
    called with that device (a `device=` argument, or a device passed as in `tensor.to(device)`) that returns a
    float64 tensor, with the frame of `package` that asked for it."""

    def __init__(self, device: torch.device, package: str = "/trl_variants/"):
        super().__init__()
        self.device, self.package, self.found = device, package, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        devices = [kwargs.get("device"), *(arg for arg in args if isinstance(arg, torch.device))]
        if (
            isinstance(result, torch.Tensor)
            and result.dtype == torch.float64
            and any(device is not None and torch.device(device) == self.device for device in devices)
        ):
            frames = [frame for frame in traceback.extract_stack() if self.package in frame.filename]
            if frames:
                self.found.append(f"{frames[-1].filename}:{frames[-1].lineno} {getattr(func, '__name__', func)}")
        return result


def test_no_float64_tensor_goes_on_the_device_in_a_dynamic_sampling_step(shared_task, tmp_path):
    """MPS (and some XPUs) have no float64: a step with the defaults puts none on the accelerator (on this CPU
    the accelerator device is the CPU itself, so host-side float64 arithmetic that names no device is left out)."""
    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=8, num_generations=G, max_steps=2)
    trainer = toy_trainer(DAPOTrainer, config, shared_task, reward_funcs=[HalfDegenerateReward(G)])
    watch = Float64OnDevice(trainer.accelerator.device)
    with watch:
        trainer.train()
    assert [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    assert watch.found == []


def test_the_float64_watch_sees_a_float64_tensor_created_on_or_moved_to_the_device():
    watch = Float64OnDevice(torch.device("cpu"), package=__file__)
    with watch:
        torch.tensor([1.0], dtype=torch.float64, device=torch.device("cpu"))
        torch.zeros(2, dtype=torch.float64).to(torch.device("cpu"))
        torch.zeros(2, dtype=torch.float64)  # names no device: host arithmetic, not counted
        torch.tensor([1.0], dtype=torch.float32, device="cpu")
    assert len(watch.found) == 2 and all(__file__ in found for found in watch.found)


def test_a_float32_model_under_bf16_autocast_trains_a_dynamic_sampling_step(shared_task, tmp_path):
    """TRL loads a model given by name in float32, and `bf16=True` (its default) turns autocast on: the step's
    generation runs with float32 keys and bfloat16 values, and trains."""
    model = shared_task.model.to(torch.float32)
    config = toy_config(DAPOConfig, tmp_path, per_device_train_batch_size=8, num_generations=G, max_steps=2, bf16=True)
    trainer = toy_trainer(DAPOTrainer, config, shared_task, reward_funcs=[HalfDegenerateReward(G)])
    assert trainer.accelerator.mixed_precision == "bf16" and model.dtype == torch.float32
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "dynamic_sampling/rounds" in entry]
    assert len(logged) == 2 and all(torch.isfinite(torch.tensor(entry["loss"])) for entry in logged)
