"""vLLM generates from the weights the trainer just synced, whichever linear kernel its CPU backend would pick.

`trl_variants.vllm_cpu` sends every linear layer of a colocate engine to torch's `linear` on its own weight. The
first test scores one fixed completion with the engine and with the trainer's model, before and after TRL's sync of
the first optimizer step: a copy vLLM packed at load time would keep the stale scores. The second forces each of
vLLM's packed-kernel checks the way the processors that take them answer, so the dispatch decision is exercised on
every machine, not only on the one CI happens to run on.
"""

import pytest
import torch
from torch import nn

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants import vllm_cpu
from trl_variants.vllm_cpu import keep_linear_weights_reloadable

from ..dynamic_sampling.scripts.rewards import HalfDegenerateReward
from .helpers import completion_logps, vllm_config, vllm_trainer

pytestmark = pytest.mark.vllm

G = 4
# vLLM holds the weights in bfloat16 on a CPU: a per-token log-prob of the toy policy then differs from the float32
# model's by a few hundredths of a nat at most.
BF16_LOGP_TOLERANCE = 0.1
# Adam's first step moves every weight with a gradient by about the learning rate, whatever the gradient's size, so
# this step moves the scores far beyond the tolerance on any machine.
LEARNING_RATE = 0.05


def vllm_completion_logps(llm, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    """The engine's log-probs of `completion_ids` after `prompt_ids`, as prompt log-probs of their concatenation."""
    from vllm import SamplingParams

    ids = prompt_ids + completion_ids
    scoring = SamplingParams(max_tokens=1, prompt_logprobs=1)
    [output] = llm.generate([{"prompt_token_ids": ids}], scoring, use_tqdm=False)
    scored = output.prompt_logprobs[len(prompt_ids) :]
    return torch.tensor([position[token].logprob for position, token in zip(scored, completion_ids, strict=True)])


def linear_paths_vllm_would_take(llm) -> set[str]:
    from trl_variants.vllm_cpu import path_vllm_would_take

    engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    return {path_vllm_would_take(module.weight) for module in engine_model.modules() if hasattr(module, "cpu_linear")}


def test_vllm_scores_with_the_weights_of_the_last_sync(shared_engine, vllm_policy, tmp_path):
    task, folder = vllm_policy
    config = vllm_config(DAPOConfig, tmp_path, max_steps=1, learning_rate=LEARNING_RATE)
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
    trainer.train()  # step 0 syncs the initial weights, generates, then takes the optimizer step
    llm = trainer.vllm_generation.llm
    tokenizer = trainer.processing_class
    prompt_ids = tokenizer(task.train_dataset[0]["prompt"])["input_ids"]
    completion_ids = tokenizer("12", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    model = trainer.model.eval()
    trained = completion_logps(model, prompt_ids, completion_ids)
    gap_before = float((vllm_completion_logps(llm, prompt_ids, completion_ids) - trained).abs().max())
    trainer.vllm_generation.sync_weights()
    gap_after = float((vllm_completion_logps(llm, prompt_ids, completion_ids) - trained).abs().max())

    paths = sorted(linear_paths_vllm_would_take(llm))
    print(f"vLLM would run this model's linear layers with {paths} on this processor; they run with torch's linear.")
    print(f"largest per-token log-prob gap, engine vs trainer: {gap_before:.4f} before the sync, {gap_after:.4f} after")
    assert gap_after < BF16_LOGP_TOLERANCE < gap_before


class Linear(nn.Module):
    def __init__(self, rows: int, columns: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(rows, columns, dtype=torch.bfloat16), requires_grad=False)


@pytest.mark.parametrize("forced", ["zentorch", "sgl-kernel", "oneDNN", "none"])
def test_every_cpu_dispatch_path_leaves_the_weight_in_place(forced, monkeypatch):
    pytest.importorskip("vllm")
    from vllm import _custom_ops
    from vllm.model_executor.layers import utils as vllm_layer_utils
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("vLLM's CPU dispatch runs only on its CPU backend")
    monkeypatch.setattr(current_platform, "is_zen_cpu", lambda: forced == "zentorch")
    monkeypatch.setattr(torch.ops.zentorch, "zentorch_linear_unary", object(), raising=False)
    monkeypatch.setattr(vllm_layer_utils, "check_cpu_sgl_kernel", lambda *_: forced == "sgl-kernel")
    monkeypatch.setattr(_custom_ops, "_supports_onednn", forced == "oneDNN")
    # vLLM's own dispatch back for the length of the test, so that the package's wrapper, and its log-once record,
    # start afresh.
    dispatch = vllm_layer_utils.dispatch_cpu_unquantized_gemm
    monkeypatch.setattr(vllm_layer_utils, "dispatch_cpu_unquantized_gemm", getattr(dispatch, "vllm_dispatch", dispatch))
    logged = []
    monkeypatch.setattr(vllm_cpu.logger, "info", logged.append)
    keep_linear_weights_reloadable()

    layer = Linear(32, 64)
    weight = layer.weight
    vllm_layer_utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert layer.weight is weight and layer.weight.shape == (32, 64)
    # The layer computes from the parameter itself: a write into it, as TRL's sync makes, changes the output.
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    weight.data.copy_(torch.randn_like(weight))
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ weight.t())
    vllm_layer_utils.dispatch_cpu_unquantized_gemm(Linear(32, 64), remove_weight=True)
    if forced == "none":
        assert logged == []  # torch's linear was vLLM's own choice: nothing changed, nothing to say
    else:
        assert len(logged) == 1 and f"would run with {forced} run with torch's linear" in logged[0]
