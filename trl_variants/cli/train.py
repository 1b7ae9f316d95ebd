"""The training run behind `trl-variants dapo|dr-grpo|grpo`, once `main.training_command` has parsed it (and
relaunched it under accelerate when asked): check the model and dataset sources, load the data, build the trainer,
train, save and optionally push. Every check on the input happens before the model is loaded, so a wrong path or
column fails in seconds, not after a download."""

import dataclasses
import os
import warnings

from datasets import Dataset, IterableDataset, load_dataset
from datasets.exceptions import DatasetsError
from trl import get_dataset, get_peft_config, get_quantization_config

from ..dynamic_sampling.trainer import DynamicSamplingExhaustedError
from ..model_card import VariantModelCardMixin, is_hub_dataset_id, tidy_model_card
from ..reliability.data_checks import first_row, prompt_type_problems
from ..rewards.reasoning_gym_source import ReasoningGymError, reasoning_gym_source
from ..rewards.registry import RewardLookupError, check_dataset_feeds, resolve_reward
from ..vllm_cpu import keep_linear_weights_reloadable
from .args import ParsedCommand, Variant
from .common import CliRunError, CliUsageError, one_line

# With `gradient_checkpointing` on (GRPOConfig's default), TRL and the Trainer call transformers' deprecated
# gradient-checkpointing methods at every step; the warnings name nothing the user set, so these alone are silenced.
DEPRECATED_CHECKPOINTING = r"`(is_gradient_checkpointing|gradient_checkpointing_(enable|disable))` is deprecated"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json", ".pt", ".gguf")
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt"}


def run_training(variant: Variant, command: ParsedCommand) -> None:
    script_args, args, model_args = command.script_args, command.training_args, command.model_args
    eval_dataset, reward_funcs = None, []
    try:
        reward_specs = [resolve_reward(name) for name in script_args.reward_funcs or []]
        if script_args.reasoning_gym_task:
            source = reasoning_gym_source(script_args.reasoning_gym_task, script_args.reasoning_gym_config or {},
                                          size=script_args.reasoning_gym_size, seed=script_args.reasoning_gym_seed)
            train_dataset, reward_funcs = source.dataset, [source.reward_func]
        check_model_source("--model_name_or_path", model_args.model_name_or_path, model_args.model_revision)
        if script_args.reward_model_name_or_path:
            check_model_source("--reward_model_name_or_path", script_args.reward_model_name_or_path)
            reward_funcs.insert(0, script_args.reward_model_name_or_path)
        if not script_args.reasoning_gym_task:
            splits = load_splits(script_args, command.dataset_args)
            train_dataset = prepare_split(splits, script_args.dataset_train_split, script_args, "train")
            if args.eval_strategy != "no":
                eval_dataset = prepare_split(splits, script_args.dataset_test_split, script_args, "test")
        for split, dataset in ((script_args.dataset_train_split, train_dataset),
                               (script_args.dataset_test_split, eval_dataset)):  # fmt: skip
            problems = prompt_type_problems(dataset, f"split {split!r} of the dataset:") if dataset is not None else []
            if problems:
                raise CliUsageError(problems[0])
        check_dataset_feeds(reward_specs, column_names(train_dataset), is_conversational(train_dataset))
    except (RewardLookupError, ReasoningGymError) as error:
        raise CliUsageError(str(error)) from None
    if is_conversational(train_dataset):
        check_chat_template(model_args, args.trust_remote_code)
    reward_funcs += [spec.func for spec in reward_specs]
    model_init_kwargs = {"revision": model_args.model_revision, "trust_remote_code": args.trust_remote_code,
                         "attn_implementation": model_args.attn_implementation, "dtype": model_args.dtype}  # fmt: skip
    args.model_init_kwargs = {**model_init_kwargs, **(args.model_init_kwargs or {})}
    keep_linear_weights_reloadable(args)  # GRPOTrainer does not do it itself; the package's trainers do
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DEPRECATED_CHECKPOINTING, category=FutureWarning)
        try:  # with push_to_hub on, the Trainer creates the Hub repository here, before training
            trainer = variant.trainer_class(
                model=model_args.model_name_or_path, reward_funcs=reward_funcs, args=args,
                train_dataset=train_dataset, eval_dataset=eval_dataset,
                peft_config=get_peft_config(model_args), quantization_config=get_quantization_config(model_args),
            )  # fmt: skip
        except Exception as error:
            if args.push_to_hub:  # else a Hub error here is the model's download, not the repository's creation
                raise_hub_failure(error, "nothing was trained; pass --push_to_hub false to train without pushing")
            if isinstance(error, ValueError):  # the Trainer's own checks of its arguments
                raise CliUsageError(one_line(error)) from None
            raise
        try:
            trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        except DynamicSamplingExhaustedError as error:
            for callback in trainer.callback_handler.callbacks:  # ends the progress bar's line before the error's
                if getattr(callback, "training_bar", None) is not None:
                    callback.training_bar.close()
            raise CliRunError(f"training stopped at step {trainer.state.global_step} (checkpoints written so far "
                              f"are in {args.output_dir}): {error}") from None  # fmt: skip
    # The model is written once training has finished, so an interrupted run leaves checkpoints, never a model that
    # looks final; `_internal_call` keeps save_model from pushing before the model card is written.
    trainer.save_model(args.output_dir, _internal_call=True)
    own_card = isinstance(trainer, VariantModelCardMixin)
    hub_dataset = script_args.dataset_name if own_card or is_hub_dataset_id(script_args.dataset_name) else None
    if own_card:
        task = script_args.reasoning_gym_task
        trainer.create_model_card(dataset_name=f"reasoning-gym {task}" if task else script_args.dataset_name)
    else:  # TRL's own GRPOTrainer, the baseline: its card, tidied the same way
        trainer.create_model_card(model_name=os.path.basename(os.path.normpath(args.output_dir)),
                                  dataset_name=hub_dataset)  # fmt: skip
        tidy_model_card(trainer, script_args.dataset_name)
    trainer.accelerator.print(f"Model saved to {args.output_dir}.")
    if args.push_to_hub:
        try:
            trainer.push_to_hub(dataset_name=hub_dataset)
        except Exception as error:
            raise_hub_failure(error, f"the trained model is saved in {args.output_dir}; upload it later with "
                              f"`hf upload {trainer.hub_model_id} {args.output_dir}`")  # fmt: skip
            raise
        trainer.accelerator.print(f"Model pushed to https://huggingface.co/{trainer.hub_model_id}.")
    if hasattr(trainer, "end"):  # finishes the trackers and the process group (transformers >= 5.18)
        trainer.end()


def raise_hub_failure(error: Exception, consequence: str) -> None:
    """Raises `CliRunError` naming the Hub, `error` and `consequence` when `error` comes from the Hub (out of reach,
    offline mode, an HTTP error such as refused credentials, no token); returns for any other error."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError

    if isinstance(error, (HfHubHTTPError, LocalTokenNotFoundError, ConnectionError)) or any(
        cls.__name__ == "TransportError" for cls in type(error).__mro__  # the HTTP client's connection errors
    ):
        status = getattr(getattr(error, "response", None), "status_code", None)
        login = isinstance(error, LocalTokenNotFoundError) or status in (401, 403)
        detail = f"{type(error).__name__}: {one_line(error)[:150]}"
        hint = "; log in with `hf auth login` or set HF_TOKEN" if login else ""
        raise CliRunError(f"push_to_hub to {constants.ENDPOINT} failed ({detail}){hint}; {consequence}.") from None


def looks_like_path(value: str) -> bool:
    """A value that can only be a local path: it exists, starts like a path, or has more slashes than a Hub id."""
    return os.path.exists(value) or value.startswith(("/", "./", "../", "~", ".\\")) or value in (".", "..") \
        or value.count("/") > 1 or "\\" in value  # fmt: skip


def check_model_source(flag: str, value: str, revision: str | None = None) -> None:
    """Raises `CliUsageError` unless `value` is a folder holding a model and its tokenizer, or a Hub model that is
    cached or answers: left to transformers, a missing relative path is read as an invalid Hub id."""
    if not looks_like_path(value):
        return check_hub_repo(flag, value, "model", revision)
    path = os.path.abspath(os.path.expanduser(value))
    files = set(os.listdir(path)) if os.path.isdir(path) else set()
    lacking = [what for what, found in (("config.json", files & {"config.json", "adapter_config.json"}),
               ("weights file", any(name.endswith(WEIGHT_SUFFIXES) for name in files)),
               ("tokenizer", files & TOKENIZER_FILES)) if not found]  # fmt: skip
    if not os.path.isdir(path):
        problem = "is a file" if os.path.exists(path) else "does not exist"
    elif lacking:
        problem = f"has no {', no '.join(lacking)} (found {sorted(files)[:8]})"
    else:
        return
    raise CliUsageError(f"{flag}={value!r}: {path} {problem}; pass the folder `save_pretrained` wrote (config.json, "
                        "the weights and the tokenizer) or a Hub model id.")


def check_hub_repo(flag: str, value: str, repo_type: str, revision: str | None = None) -> None:
    """Raises `CliUsageError` unless the Hub repository `value` is cached or the Hub answers for it within 10 s: left
    to the libraries, one out of reach waits through retries and ends in a traceback."""
    from datasets import config
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(value)
        probe = "config.json" if repo_type == "model" else "README.md"
        if isinstance(try_to_load_from_cache(value, probe, revision=revision, repo_type=repo_type), str) or (
            repo_type == "dataset" and os.path.isdir(os.path.join(config.HF_DATASETS_CACHE, value.replace("/", "___")))
        ):
            return
        if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            download = f"hf download {value}" + (" --repo-type dataset" if repo_type == "dataset" else "")
            reason = f"the Hub {repo_type} is not in the local cache while HF_HUB_OFFLINE=1; download it first " \
                     f"(`{download}`) or pass a local folder"  # fmt: skip
        else:
            HfApi().repo_info(value, repo_type=repo_type, revision=revision, timeout=10)
            return
    except HFValidationError:
        reason = f"it is not a valid Hub {repo_type} id (owner/name: letters, digits, '-', '_', '.')"
    except (RepositoryNotFoundError, RevisionNotFoundError):
        at = f" at revision {revision!r}" if revision else ""
        reason = f"no such Hub {repo_type}{at} (or it is private: log in with `hf auth login`); check the spelling"
    except Exception as error:
        reason = f"the Hub could not be reached ({type(error).__name__}); check the connection, or set " \
                 "HF_HUB_OFFLINE=1 to use only the local cache"  # fmt: skip
    raise CliUsageError(f"{flag}={value!r}: no local folder of that name, and {reason}.")


def check_chat_template(model_args, trust_remote_code: bool) -> None:
    """Raises `CliUsageError` when the prompts are conversations but the tokenizer has no chat template; without
    the check the run loads the model and fails at its first generation."""
    from transformers import AutoTokenizer

    name = f"--model_name_or_path={model_args.model_name_or_path!r}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                                  trust_remote_code=trust_remote_code)  # fmt: skip
    except (OSError, ValueError) as error:
        raise CliUsageError(f"{name}: its tokenizer cannot be loaded ({one_line(error)[:200]}).") from None
    if not getattr(tokenizer, "chat_template", None):
        raise CliUsageError(f"{name}: its tokenizer has no chat template, which conversational prompts (from "
                            "--system_prompt or the dataset) need; use a chat model, add a chat template to the "
                            "tokenizer, or give plain-text prompts (--system_prompt '' turns a recipe's off).")


def data_file(value: str | None) -> tuple[str, str] | None:
    """`(folder, file name)` when `value` names one local data file, which `load_dataset(folder, data_files=name)`
    reads as the train split with the builder its suffix calls for (`load_dataset(file)` takes it for a Hub id)."""
    path = os.path.abspath(os.path.expanduser(value or ""))
    return os.path.split(path) if value and looks_like_path(value) and os.path.isfile(path) else None


def load_splits(script_args, dataset_args):
    """The dataset's splits, from a `datasets:` mixture (TRL's `DatasetMixtureConfig`, where an entry's `path` may
    be one data file too) or `--dataset_name`."""
    name, config = script_args.dataset_name, script_args.dataset_config
    try:
        if dataset_args.datasets:
            entries = [dataclasses.replace(entry, path=found[0], data_files=found[1])
                       if entry.data_files is None and (found := data_file(entry.path)) else entry
                       for entry in dataset_args.datasets]  # fmt: skip
            return get_dataset(dataclasses.replace(dataset_args, datasets=entries))
        if not name:
            raise CliUsageError("no dataset: pass --dataset_name (a Hub id, a local folder or one data file) or a "
                                "`datasets:` list.")  # fmt: skip
        if not looks_like_path(name):
            check_hub_repo("--dataset_name", name, "dataset")
        elif not os.path.exists(os.path.expanduser(name)):
            raise CliUsageError(f"--dataset_name={name!r}: no such file or folder ({os.path.abspath(name)}); pass "
                                "a folder of data files, one data file, or a Hub dataset id such as openai/gsm8k.")
        folder, file = data_file(name) or (name, None)
        return load_dataset(folder, name=config, data_files=file, streaming=script_args.dataset_streaming)
    except (ValueError, DatasetsError, FileNotFoundError, ConnectionError) as error:
        source = "the recipe's `datasets:` list" if dataset_args.datasets else f"--dataset_name={name!r}"
        unset = "; --dataset_config none unsets the config" if config and "BuilderConfig" in str(error) else ""
        raise CliUsageError(f"{source} with --dataset_config={config!r} cannot be loaded: {one_line(error)}"
                            f"{unset}.") from None


def prepare_split(splits, split_name: str, script_args, role: str) -> Dataset | IterableDataset:
    """One split with the column mapping, filter and system prompt applied, checked to have a `prompt` column."""
    if split_name not in splits:
        raise CliUsageError(f"--dataset_{role}_split={split_name!r} is not a split of the dataset; it has "
                            f"{list(splits)}.")  # fmt: skip
    dataset, columns = splits[split_name], column_names(splits[split_name])
    if isinstance(dataset, Dataset) and len(dataset) == 0:
        raise CliUsageError(f"split {split_name!r} of the dataset is empty.")
    renames = {script_args.prompt_column: "prompt", script_args.solution_column: "solution"}
    renames.pop(None, None)
    for source, target in renames.items():
        if source not in columns:
            hint = "; name the prompt column with --prompt_column" if source == "prompt" else ""
            raise CliUsageError(f"dataset column {source!r} ({target}_column) is missing from split {split_name!r}; "
                                f"it has {columns}{hint}.")  # fmt: skip
    if copies := {source: target for source, target in renames.items() if source != target}:
        # Copied, not renamed: a reward function may still read the original column (e.g. `answer`).
        dataset = dataset.map(lambda row: {target: row[source] for source, target in copies.items()})
        columns = column_names(dataset)
    allowed: dict[str, set[str]] = {}
    for entry in script_args.dataset_filter or []:
        column, separator, value = entry.partition("=")
        if not separator or not column.strip() or column.strip() not in columns:
            raise CliUsageError(f"dataset_filter entry {entry!r} is not of the form column=value with a column of "
                                f"{columns}.")  # fmt: skip
        allowed.setdefault(column.strip(), set()).add(value.strip())
    if allowed:
        dataset = dataset.filter(lambda row: all(str(row[column]) in values for column, values in allowed.items()))
        if isinstance(dataset, Dataset) and len(dataset) == 0:
            raise CliUsageError(f"dataset_filter {script_args.dataset_filter} keeps no rows; check the values.")
    if script_args.system_prompt:  # an empty --system_prompt "" turns the recipe's off
        if is_conversational(dataset):
            raise CliUsageError("--system_prompt applies to plain-text prompts, but this dataset's prompts are "
                                "already conversations; add the system message to the data instead.")  # fmt: skip
        system = {"role": "system", "content": script_args.system_prompt}
        dataset = dataset.map(lambda row: {"prompt": [system, {"role": "user", "content": row["prompt"]}]})
    return dataset


def column_names(dataset) -> list[str]:
    """The dataset's columns; a streamed dataset without declared features shows them in its first row."""
    return list(dataset.column_names if dataset.column_names is not None else first_row(dataset) or [])


def is_conversational(dataset) -> bool:
    row = first_row(dataset)
    return row is not None and isinstance(row["prompt"], list)
