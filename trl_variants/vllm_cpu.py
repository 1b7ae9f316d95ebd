"""vLLM's CPU backend under TRL's colocate mode: every linear layer computes from the weight TRL's sync writes.

vLLM 0.31's CPU build gives each 2-D linear weight a kernel (`dispatch_cpu_unquantized_gemm`, tried in this order):
zentorch, sgl-kernel and oneDNN compute from a private copy of the weight and, for linear layers, drop the
parameter, so TRL's colocate weight sync fails; the output embedding keeps its parameter, so there the sync succeeds
while vLLM goes on sampling from the initial weights. Engines built under colocate mode on vLLM's CPU platform send
every 2-D weight to torch's `linear` on its own parameter instead (slower, but it follows training); meta and
non-2-D weights, GPU engines and server mode are left to vLLM. docs/multi_gpu.md, "vLLM on a CPU", has the details.
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
