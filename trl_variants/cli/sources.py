"""Checks that the model, tokenizer and dataset named on the command line can be loaded, before anything is loaded.

Left to transformers and datasets, a missing relative path is taken for a Hub id and fails with a validation
traceback, a Hub id with the Hub unreachable waits through retries, and a folder without model files fails deep in
`from_pretrained`. Each case here is one `CliUsageError` naming the flag, the value, what was looked for and the fix.
"""

import os

from .common import CliUsageError

MODEL_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json", ".pt", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
DATA_FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet", ".arrow", ".txt", ".tsv", ".json.gz", ".jsonl.gz")
NO_DATASET = "no dataset: pass --dataset_name (a Hub id, a local folder or one data file) or a `datasets:` list."
# How long a reachability check of the Hub may take before the run is refused (seconds).
HUB_CHECK_TIMEOUT = 10


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def looks_like_path(value: str) -> bool:
    """A value that can only be a local path: it exists, starts like a path, or has more slashes than a Hub id."""
    return (
        os.path.exists(value)
        or value.startswith(("/", "./", "../", "~", ".\\"))
        or value in (".", "..")
        or value.count("/") > 1
        or "\\" in value
    )


def check_model_source(flag: str, value: str, revision: str | None = None, needs_tokenizer: bool = True) -> None:
    """Raises `CliUsageError` when `value` is neither a local model folder nor a Hub model that can be reached."""
    if looks_like_path(value):
        check_model_folder(flag, value, needs_tokenizer)
    else:
        _check_hub_repo(flag, value, "model", revision, "config.json")


def check_model_folder(flag: str, value: str, needs_tokenizer: bool = True) -> None:
    """Raises `CliUsageError` when the local folder `value` does not hold a model (and its tokenizer)."""
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise CliUsageError(
            f"{flag}={value!r}: no such model folder ({path}); pass the folder that holds config.json and the "
            "weights, or a Hub model id such as Qwen/Qwen2.5-0.5B-Instruct."
        )
    if not os.path.isdir(path):
        raise CliUsageError(
            f"{flag}={value!r} is a file; pass the folder that holds config.json and the weights (the folder "
            "`save_pretrained` writes)."
        )
    files = os.listdir(path)
    has_weights = any(name.endswith(MODEL_WEIGHT_SUFFIXES) for name in files)
    # A PEFT adapter folder names its base model in adapter_config.json, which transformers loads from there.
    has_config = "config.json" in files or "adapter_config.json" in files
    if not has_config or not has_weights:
        raise CliUsageError(
            f"{flag}={value!r} holds no model: looked for config.json (or a PEFT adapter_config.json) and a weights "
            f"file (*.safetensors or *.bin) in {path}, found {sorted(files)[:8]}; pass the folder `save_pretrained` "
            "wrote."
        )
    if needs_tokenizer and not any(name in files for name in TOKENIZER_FILES):
        raise CliUsageError(
            f"{flag}={value!r} holds no tokenizer: looked for tokenizer.json or tokenizer_config.json in {path}; "
            "save the tokenizer next to the model with `tokenizer.save_pretrained(folder)`."
        )


def _check_hub_repo(flag: str, value: str, repo_type: str, revision: str | None, probe_file: str) -> None:
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import (
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    kind = "dataset" if repo_type == "dataset" else "model"
    try:
        validate_repo_id(value)
    except HFValidationError:
        raise CliUsageError(
            f"{flag}={value!r}: no local folder of that name, and it is not a valid Hub {kind} id (owner/name, "
            "letters, digits, '-', '_', '.'); pass an existing local folder or a Hub id."
        ) from None
    cached = try_to_load_from_cache(value, probe_file, revision=revision, repo_type=repo_type)
    if isinstance(cached, str) or (repo_type == "dataset" and _dataset_in_datasets_cache(value)):
        return
    if hub_offline():
        repo_type_flag = " --repo-type dataset" if kind == "dataset" else ""
        raise CliUsageError(
            f"{flag}={value!r}: no local folder of that name, and the Hub {kind} is not in the local cache while "
            f"HF_HUB_OFFLINE=1; download it first (`hf download {value}{repo_type_flag}`) or pass a local folder."
        )
    api = HfApi()
    try:
        if repo_type == "dataset":
            api.dataset_info(value, revision=revision, timeout=HUB_CHECK_TIMEOUT)
        else:
            api.model_info(value, revision=revision, timeout=HUB_CHECK_TIMEOUT)
    except RevisionNotFoundError:
        raise CliUsageError(f"{flag}={value!r}: the Hub {kind} has no revision {revision!r}.") from None
    except RepositoryNotFoundError:
        raise CliUsageError(
            f"{flag}={value!r}: no local folder of that name and no such Hub {kind} (or it is private: log in with "
            "`hf auth login`); check the spelling."
        ) from None
    except Exception as error:
        raise CliUsageError(
            f"{flag}={value!r}: no local folder of that name, and the Hub could not be reached to fetch the {kind} "
            f"({type(error).__name__}); check the connection, or set HF_HUB_OFFLINE=1 to use only the local cache."
        ) from None


def _dataset_in_datasets_cache(value: str) -> bool:
    """Whether `datasets` has prepared this Hub dataset before (it can then load it offline)."""
    from datasets import config

    cache = os.path.join(str(config.HF_DATASETS_CACHE), value.replace("/", "___"))
    return os.path.isdir(cache)


def check_dataset_source(value: str, dataset_config: str | None) -> None:
    """Raises `CliUsageError` when `--dataset_name` is neither a local data folder/file nor a reachable Hub dataset."""
    if looks_like_path(value):
        check_local_dataset(value)
    else:
        _check_hub_repo("--dataset_name", value, "dataset", None, "README.md")


def check_local_dataset(value: str) -> None:
    """Raises `CliUsageError` when the local `--dataset_name` is missing or holds no data file."""
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise CliUsageError(
            f"--dataset_name={value!r}: no such file or folder ({path}); pass a folder of data files (json, jsonl, "
            "csv, parquet), one such file, or a Hub dataset id such as openai/gsm8k."
        )
    files = os.listdir(path) if os.path.isdir(path) else [os.path.basename(path)]
    if not any(name.endswith(DATA_FILE_SUFFIXES) or name.endswith(".py") for name in _walk(path)):
        raise CliUsageError(
            f"--dataset_name={value!r} holds no data files: looked for *.json, *.jsonl, *.csv or *.parquet in "
            f"{path}, found {sorted(files)[:8]}."
        )


def missing_column_problem(column: str, flag: str, split_name: str, columns: list[str]) -> str:
    """The message for a `--prompt_column` or `--solution_column` the dataset's split does not have."""
    hint = "; name the prompt column with --prompt_column" if column == "prompt" else ""
    return f"dataset column {column!r} ({flag}) is missing from split {split_name!r}; it has {columns}{hint}."


def local_data_file(value: str | None) -> str | None:
    """The absolute path when `value` names one local data file rather than a folder or a Hub id, else `None`."""
    if not value or not looks_like_path(value):
        return None
    path = os.path.abspath(os.path.expanduser(value))
    return path if os.path.isfile(path) else None


def data_file_loader(path: str) -> tuple[str, dict]:
    """The `datasets` builder and its options for one data file, chosen by its suffix as `datasets` chooses them for
    the files of a folder (`.jsonl` and `.json` -> json, `.csv` -> csv, `.tsv` -> csv with a tab separator, ...).

    `load_dataset(path_to_file)` would take the file's name for a Hub id; `load_dataset(builder, data_files=path)`
    reads the one file into a `train` split, as a folder holding only that file would be read.
    """
    from datasets.packaged_modules import _EXTENSION_TO_MODULE

    name = path.lower()
    for compression in (".gz", ".bz2", ".xz", ".zst"):
        name = name.removesuffix(compression)
    suffix = os.path.splitext(name)[1]
    if suffix not in _EXTENSION_TO_MODULE:
        raise CliUsageError(
            f"--dataset_name={path!r}: cannot read a {suffix or 'suffix-less'} file as a dataset; pass a .json, "
            ".jsonl, .csv or .parquet file, or a folder of them."
        )
    builder, options = _EXTENSION_TO_MODULE[suffix]
    return builder, dict(options)


def _walk(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return [name for _, _, names in os.walk(path) for name in names]


def dataset_config_problem(value: str, dataset_config: str, error: Exception) -> str:
    """The message for a `--dataset_config` the dataset does not have, with the configs it has."""
    text = " ".join(str(error).split())
    available = text.split("Available:", 1)[1].strip() if "Available:" in text else "see the dataset's page"
    local = " (a local folder or file has only the 'default' config)" if looks_like_path(value) else ""
    return (
        f"--dataset_config={dataset_config!r} is not a config of dataset {value!r}{local}; it has {available}. "
        "Pass one of those, or unset it with --dataset_config none."
    )


def check_chat_template(flag: str, value: str, revision: str | None, trust_remote_code: bool, reason: str) -> None:
    """Raises `CliUsageError` when the model's tokenizer has no chat template but the prompts are conversations.

    Without the check, the run loads the model and fails at its first generation with a transformers traceback.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(value, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise CliUsageError(
            f"{flag}={value!r}: its tokenizer cannot be loaded ({' '.join(str(error).split())[:200]})."
        ) from None
    if not getattr(tokenizer, "chat_template", None):
        raise CliUsageError(
            f"{flag}={value!r}: its tokenizer has no chat template, which {reason} needs; use a chat model, add a "
            "chat template to the tokenizer, or give plain-text prompts (--system_prompt '' turns a recipe's "
            "system prompt off)."
        )
