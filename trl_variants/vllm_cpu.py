"""vLLM's CPU backend under TRL's colocate mode: every linear layer computes from the weight TRL's sync writes.

After loading a model, vLLM 0.31's CPU build picks a kernel for every 2-D linear weight in
`vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`. It tries, in this order:

- **zentorch** (AMD Zen processors with the zentorch package): the layer computes from a private, optionally
  prepacked copy of the weight;
- **sgl-kernel** (`check_cpu_sgl_kernel`: AMX tiles, a bf16, fp16 or int8 weight, and for bf16/fp16 a weight of at
  most 1 MiB): the layer computes from a packed copy;
- **oneDNN** (`_custom_ops._supports_onednn`, AVX-512 processors among others): the layer computes from a oneDNN
  handle made from the weight at load time;
- **torch's `linear`**, the fallback: the layer computes from its own `weight` parameter.

For linear layers the first three also replace the parameter with an empty one. TRL's colocate mode updates the
engine after every optimizer step through the model's `load_weights`, which then fails with
`AttributeError: 'Parameter' object has no attribute 'weight_loader'`. Worse, the output embedding (`lm_head`)
goes through the same dispatch but keeps its parameter: there the sync succeeds, and vLLM goes on sampling from the
packed copy of the initial weights, silently.

So for engines built under colocate mode, every 2-D weight takes the fallback: the layer computes with torch's
`linear` from the very parameter TRL writes. Meta and non-2-D weights (convolutions, MoE experts) are left to vLLM.
The fallback is slower on a CPU than the packed kernels, which is the price of an engine that follows training.
GPU engines, and engines in another process (TRL's server mode), are not touched.
"""

from transformers.utils import logging

logger = logging.get_logger(__name__)

ZENTORCH, SGL_KERNEL, ONEDNN, TORCH_LINEAR = "zentorch", "sgl-kernel", "oneDNN", "torch linear"


def vllm_cpu_linear_path(*, zentorch: bool, sgl_kernel: bool, onednn: bool) -> str:
    """The kernel vLLM 0.31's CPU dispatch would give a 2-D linear weight, in the order it tries them: zentorch on a
    Zen processor that has it, then sgl-kernel where `check_cpu_sgl_kernel` holds for the weight, then oneDNN where
    vLLM's oneDNN ops are built, else torch's `linear`."""
    if zentorch:
        return ZENTORCH
    if sgl_kernel:
        return SGL_KERNEL
    if onednn:
        return ONEDNN
    return TORCH_LINEAR


def keep_linear_weights_reloadable(args=None) -> bool:
    """Makes vLLM's CPU backend compute every linear layer with torch's `linear` from its own weight, for engines
    built after this call, when `args` asks for vLLM in colocate mode (always when `args` is None). Returns whether
    the dispatch is now the package's; without vLLM, or on another platform, it does nothing."""
    if args is not None and not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        return False
    try:
        from vllm.model_executor.layers import utils as vllm_layer_utils
        from vllm.platforms import current_platform
    except ImportError:
        return False
    if not current_platform.is_cpu():
        return False
    if not hasattr(vllm_layer_utils.dispatch_cpu_unquantized_gemm, "vllm_dispatch"):
        vllm_layer_utils.dispatch_cpu_unquantized_gemm = _reloadable_dispatch(
            vllm_layer_utils.dispatch_cpu_unquantized_gemm
        )
    return True


def _reloadable_dispatch(vllm_dispatch):
    """vLLM's `dispatch_cpu_unquantized_gemm` with every 2-D weight sent to the torch-`linear` fallback. vLLM's own
    modules import the function at call time from its module, so replacing the module's attribute reaches them."""
    replaced_paths: set[str] = set()

    def dispatch(layer, remove_weight: bool) -> None:
        import torch

        weight = layer.weight
        if weight.is_meta or weight.ndim != 2:
            return vllm_dispatch(layer, remove_weight)
        path = path_vllm_would_take(weight)
        if path != TORCH_LINEAR and path not in replaced_paths:
            replaced_paths.add(path)
            logger.info(
                f"vLLM CPU backend: linear layers that vLLM would run with {path} run with torch's linear instead, "
                "so that TRL's colocate weight sync updates the weights vLLM generates from."
            )
        layer.cpu_linear = torch.nn.functional.linear

    dispatch.vllm_dispatch = vllm_dispatch
    return dispatch


def path_vllm_would_take(weight) -> str:
    """The kernel vLLM 0.31 would give `weight` on this processor, had the package not changed its dispatch."""
    import torch
    from vllm import _custom_ops
    from vllm.model_executor.layers.utils import check_cpu_sgl_kernel
    from vllm.platforms import current_platform

    rows, columns = weight.shape
    return vllm_cpu_linear_path(
        zentorch=current_platform.is_zen_cpu() and hasattr(torch.ops.zentorch, "zentorch_linear_unary"),
        sgl_kernel=check_cpu_sgl_kernel(rows, columns, weight.dtype),
        onednn=bool(getattr(_custom_ops, "_supports_onednn", False)),
    )
