"""The training run behind `trl-variants dapo|dr-grpo|grpo`: load and check the dataset, build the trainer, train,
save and optionally push. Every check on the input happens before the model is loaded, so a wrong column name
fails in seconds rather than after a multi-gigabyte download."""

import dataclasses
import os
import warnings

from datasets import Dataset, DatasetDict, IterableDataset, load_dataset
from datasets.exceptions import DatasetsError
from trl import get_dataset, get_peft_config, get_quantization_config

from ..dynamic_sampling.trainer import DynamicSamplingExhaustedError
from ..model_card import VariantModelCardMixin, is_hub_dataset_id, tidy_model_card
from ..reliability.data_checks import prompt_type_problems
from ..rewards.registry import RewardLookupError, check_dataset_feeds, resolve_reward
from ..vllm_cpu import keep_linear_weights_reloadable
from .args import ParsedCommand, Variant, one_line
from .common import CliRunError, CliUsageError
from .reasoning_gym_data import reasoning_gym_training_source
from .sources import (
    NO_DATASET,
    check_chat_template,
    check_dataset_source,
    check_model_source,
    data_file_loader,
    dataset_config_problem,
    local_data_file,
    missing_column_problem,
)

# With `gradient_checkpointing` on, as GRPOConfig's default (kept by the variant configs) has it, TRL and the
# Trainer call transformers' deprecated gradient-checkpointing methods at every step. The warnings name nothing the
# user set or could change, so these, and only these, are silenced during the run.
DEPRECATED_CHECKPOINTING_WARNINGS = (
    r"`(is_gradient_checkpointing|gradient_checkpointing_(enable|disable))` is deprecated"
)


def run_training(variant: Variant, command: ParsedCommand) -> None:
    script_args, training_args = command.script_args, command.training_args
    model_args, dataset_args = command.model_args, command.dataset_args

    try:
        reward_specs = [resolve_reward(name) for name in script_args.reward_funcs or []]
    except RewardLookupError as error:
        raise CliUsageError(str(error)) from None

    task_rewards, eval_dataset, source = [], None, None
    if script_args.reasoning_gym_task:
        source = reasoning_gym_training_source(script_args, training_args, dataset_args)
        train_dataset, task_rewards = source.dataset, [source.reward_func]
    check_model_source("--model_name_or_path", model_args.model_name_or_path, model_args.model_revision)
    if script_args.reward_model_name_or_path:
        check_model_source("--reward_model_name_or_path", script_args.reward_model_name_or_path)
    if source is None:
        splits = load_splits(script_args, dataset_args)
        train_dataset = prepare_split(splits, script_args.dataset_train_split, script_args, role="train")
        if training_args.eval_strategy != "no":
            eval_dataset = prepare_split(splits, script_args.dataset_test_split, script_args, role="test")
    splits_to_check = [(script_args.dataset_train_split, train_dataset), (script_args.dataset_test_split, eval_dataset)]
    for split, dataset in splits_to_check:
        problems = [] if dataset is None else prompt_type_problems(dataset, f"split {split!r} of the dataset:")
        if problems:
            raise CliUsageError(problems[0])
    conversational = is_conversational_dataset(train_dataset)
    try:
        check_dataset_feeds(reward_specs, column_names(train_dataset), conversational)
    except RewardLookupError as error:
        raise CliUsageError(str(error)) from None
    if conversational:
        check_chat_template(
            "--model_name_or_path",
            model_args.model_name_or_path,
            model_args.model_revision,
            training_args.trust_remote_code,
            reason="--system_prompt" if script_args.system_prompt else "the dataset's conversational prompts",
        )

    reward_funcs = [*task_rewards, *(spec.func for spec in reward_specs)]
    if script_args.reward_model_name_or_path:
        reward_funcs.insert(0, script_args.reward_model_name_or_path)

    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    training_args.model_init_kwargs = {**model_init_kwargs, **(training_args.model_init_kwargs or {})}

    # GRPOTrainer does not do it itself; the package's trainers do, and a second call changes nothing.
    keep_linear_weights_reloadable(training_args)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DEPRECATED_CHECKPOINTING_WARNINGS, category=FutureWarning)
        try:  # with push_to_hub on, the Trainer creates the Hub repository here, before training
            trainer = variant.trainer_class(
                model=model_args.model_name_or_path,
                reward_funcs=reward_funcs,
                args=training_args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                peft_config=get_peft_config(model_args),
                quantization_config=get_quantization_config(model_args),
            )
        except Exception as error:
            raise_hub_failure(error, "nothing was trained; pass --push_to_hub false to train without pushing")
            raise
        try:
            trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        except DynamicSamplingExhaustedError as error:
            for callback in trainer.callback_handler.callbacks:  # ends the progress bar's line before the error's
                if getattr(callback, "training_bar", None) is not None:
                    callback.training_bar.close()
            raise CliRunError(
                f"training stopped at step {trainer.state.global_step} (checkpoints written so far are in "
                f"{training_args.output_dir}): {error}"
            ) from None
    # The model is written only once training has finished, so an interrupted run leaves checkpoints, never a
    # top-level model that looks final. `_internal_call` keeps save_model from pushing: the push below follows
    # once the model card is written, and a failed push then leaves the whole folder saved.
    trainer.save_model(training_args.output_dir, _internal_call=True)
    if isinstance(trainer, VariantModelCardMixin):
        trainer.create_model_card(dataset_name=dataset_title(script_args))
    else:  # TRL's own GRPOTrainer, the baseline
        title = os.path.basename(os.path.normpath(training_args.output_dir))
        trainer.create_model_card(model_name=title, dataset_name=hub_dataset_name(script_args))
        tidy_model_card(trainer, script_args.dataset_name)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        own_card = isinstance(trainer, VariantModelCardMixin)
        try:
            trainer.push_to_hub(dataset_name=script_args.dataset_name if own_card else hub_dataset_name(script_args))
        except Exception as error:
            raise_hub_failure(
                error, f"the trained model is saved in {training_args.output_dir}; upload it later with "
                f"`hf upload {trainer.hub_model_id} {training_args.output_dir}`",
            )  # fmt: skip
            raise
        trainer.accelerator.print(f"Model pushed to https://huggingface.co/{trainer.hub_model_id}.")
    # Finishes the trackers and the process group (transformers >= 5.18; earlier versions have no such step).
    if hasattr(trainer, "end"):
        trainer.end()


def raise_hub_failure(error: Exception, consequence: str) -> None:
    """Raises `CliRunError` naming the Hub and `consequence` when `error` is the Hub out of reach (offline mode,
    no connection) or refusing the credentials; returns for any other error, which the caller re-raises."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, OfflineModeIsEnabled):
        reason = "HF_HUB_OFFLINE is set, so the Hub cannot be reached (unset it to push)"
    elif isinstance(error, LocalTokenNotFoundError):
        reason = "no Hub token was found; log in with `hf auth login` or set HF_TOKEN"
    elif isinstance(error, HfHubHTTPError) and status in (401, 403):
        reason = f"the Hub refused the credentials (HTTP {status}); log in with `hf auth login` or set HF_TOKEN"
    elif isinstance(error, ConnectionError) or any(cls.__name__ == "TransportError" for cls in type(error).__mro__):
        detail = f"{type(error).__name__}: {one_line(error)[:100]}"
        reason = f"the Hub at {constants.ENDPOINT} could not be reached ({detail})"
    else:
        return
    raise CliRunError(f"push_to_hub failed: {reason}; {consequence}.") from None


def dataset_title(script_args) -> str | None:
    if script_args.reasoning_gym_task:
        return f"reasoning-gym {script_args.reasoning_gym_task}"
    return script_args.dataset_name


def hub_dataset_name(script_args) -> str | None:
    """The dataset name TRL's own model card may link: only a Hub id."""
    return script_args.dataset_name if is_hub_dataset_id(script_args.dataset_name) else None


def load_splits(script_args, dataset_args) -> DatasetDict:
    """The dataset's splits, from a `datasets:` mixture (TRL's `DatasetMixtureConfig`) or `--dataset_name`."""
    try:
        if dataset_args.datasets:
            return get_dataset(with_data_files_resolved(dataset_args))
        if not script_args.dataset_name:
            raise CliUsageError(NO_DATASET)
        check_dataset_source(script_args.dataset_name, script_args.dataset_config)
        data_file = local_data_file(script_args.dataset_name)
        if data_file is not None:
            builder, options = data_file_loader(data_file)
            return load_dataset(
                builder,
                name=script_args.dataset_config,
                data_files=data_file,
                streaming=script_args.dataset_streaming,
                **options,
            )
        return load_dataset(
            script_args.dataset_name, name=script_args.dataset_config, streaming=script_args.dataset_streaming
        )
    except ValueError as error:
        if script_args.dataset_config and "BuilderConfig" in str(error):
            raise CliUsageError(
                dataset_config_problem(script_args.dataset_name, script_args.dataset_config, error)
            ) from None
        raise CliUsageError(
            f"cannot load dataset {script_args.dataset_name!r} (config {script_args.dataset_config!r}): "
            f"{' '.join(str(error).split())}"
        ) from None
    except (DatasetsError, FileNotFoundError, ConnectionError) as error:
        raise CliUsageError(
            f"cannot load dataset {script_args.dataset_name!r} (config {script_args.dataset_config!r}): "
            f"{' '.join(str(error).split())}"
        ) from None


def with_data_files_resolved(dataset_args):
    """`dataset_args` with every mixture entry whose `path` is one local data file read through its builder, as
    `--dataset_name FILE` is; TRL's `get_dataset` passes `path` straight to `load_dataset`."""
    entries = []
    for entry in dataset_args.datasets:
        data_file = local_data_file(entry.path) if entry.data_files is None else None
        if data_file is not None:
            builder, _ = data_file_loader(data_file)
            entry = dataclasses.replace(entry, path=builder, data_files=data_file)
        entries.append(entry)
    return dataclasses.replace(dataset_args, datasets=entries)


def prepare_split(splits, split_name: str, script_args, role: str) -> Dataset | IterableDataset:
    """One split with the column mapping, filter and system prompt applied, checked to have a `prompt` column."""
    if split_name not in splits:
        raise CliUsageError(
            f"--dataset_{role}_split={split_name!r} is not a split of the dataset; it has {list(splits)}. Pass one "
            "of those."
        )
    dataset = splits[split_name]
    if isinstance(dataset, Dataset) and len(dataset) == 0:
        raise CliUsageError(f"split {split_name!r} of the dataset is empty.")
    columns = column_names(dataset)
    renames = {script_args.prompt_column: "prompt"}
    if script_args.solution_column:
        renames[script_args.solution_column] = "solution"
    for source, target in renames.items():
        if source not in columns:
            flag = "prompt_column" if target == "prompt" else "solution_column"
            raise CliUsageError(missing_column_problem(source, flag, split_name, columns))
    copies = {source: target for source, target in renames.items() if source != target}
    if copies:
        # Copied, not renamed: a reward function may still read the original column (e.g. `answer`).
        dataset = dataset.map(lambda row: {target: row[source] for source, target in copies.items()})
    dataset = apply_filter(dataset, script_args.dataset_filter)
    if script_args.system_prompt:  # an empty --system_prompt "" turns the recipe's off
        dataset = with_system_prompt(dataset, script_args.system_prompt)
    return dataset


def parse_filter(entries: list[str] | None) -> dict[str, set[str]]:
    allowed: dict[str, set[str]] = {}
    for entry in entries or []:
        column, separator, value = entry.partition("=")
        if not separator or not column:
            raise CliUsageError(f"dataset_filter entry {entry!r} is not of the form column=value.")
        allowed.setdefault(column.strip(), set()).add(value.strip())
    return allowed


def apply_filter(dataset, entries: list[str] | None):
    allowed = parse_filter(entries)
    if not allowed:
        return dataset
    missing = [column for column in allowed if column not in column_names(dataset)]
    if missing:
        raise CliUsageError(f"dataset_filter names column(s) {missing}; the dataset has {column_names(dataset)}.")
    filtered = dataset.filter(lambda row: all(str(row[column]) in values for column, values in allowed.items()))
    if isinstance(filtered, Dataset) and len(filtered) == 0:
        raise CliUsageError(f"dataset_filter {entries} keeps no rows; check the values against the dataset.")
    return filtered


def with_system_prompt(dataset, system_prompt: str):
    if is_conversational_dataset(dataset):
        raise CliUsageError(
            "--system_prompt applies to plain-text prompts, but this dataset's prompts are already conversations; "
            "add the system message to the data instead."
        )

    def to_conversation(row):
        return {"prompt": [{"role": "system", "content": system_prompt}, {"role": "user", "content": row["prompt"]}]}

    return dataset.map(to_conversation)


def first_row(dataset) -> dict | None:
    rows = dataset.take(1) if isinstance(dataset, IterableDataset) else dataset.select(range(min(1, len(dataset))))
    return next(iter(rows), None)


def column_names(dataset) -> list[str]:
    """The dataset's columns; a streamed dataset without declared features shows them in its first row."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    row = first_row(dataset)
    return list(row) if row is not None else []


def is_conversational_dataset(dataset) -> bool:
    row = first_row(dataset)
    return row is not None and isinstance(row["prompt"], list)
