"""vLLM's CPU backend under TRL's colocate mode: keep linear weights where TRL's weight sync writes them.

After loading a model, vLLM's CPU build hands each linear layer's weight to a oneDNN matmul handle and replaces the
parameter with an empty one, wherever its oneDNN kernels are available (AVX-512 processors among them). TRL's
colocate mode updates the engine's weights after every optimizer step through the model's `load_weights`, which then
fails with `AttributeError: 'Parameter' object has no attribute 'weight_loader'`, and could not reach the packed
copy anyway. Without the oneDNN dispatch, vLLM computes those layers with torch's `linear` on the parameters that
TRL updates. GPU engines are not touched.
"""

from transformers.utils import logging

logger = logging.get_logger(__name__)


def keep_linear_weights_reloadable(args=None) -> bool:
    """Turns off vLLM's oneDNN linear dispatch on its CPU backend, before an engine is built, when `args` asks for
    vLLM in colocate mode (always when `args` is None). Returns whether it changed anything; without vLLM, on
    another platform or where oneDNN is absent it does nothing."""
    if args is not None and not (getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", None) == "colocate"):
        return False
    try:
        from vllm import _custom_ops
        from vllm.platforms import current_platform
    except ImportError:
        return False
    if not current_platform.is_cpu() or not getattr(_custom_ops, "_supports_onednn", False):
        return False
    _custom_ops._supports_onednn = False
    logger.info("vLLM CPU backend: oneDNN linear dispatch off, so that TRL's colocate weight sync can update weights.")
    return True
