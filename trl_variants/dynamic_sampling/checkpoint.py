"""Saving and restoring the dynamic sampler's state with a checkpoint: `save_sampler_state`, `load_sampler_state`.

`STATE_FILE` (JSON, written by the main process) holds the refill source's position, the pass-rate estimate, the
smallest generate-call cap an out-of-memory error taught any process (kept with dynamic sampling off too: it caps a
plain generation batch's call alike) and, with prompt skipping, the skipper's state (its arrays go to a file of
their own, experimental/prompt_skipping).

Carried groups (`dynamic_sampling_carry_surplus=True`). Each carried row lives on the process that will train it,
so each process writes its own rows (`CARRIED_RANK_FILE`, rewards included) and the main process writes
`CARRIED_FILE`: the number of processes and every row's process. A run resumed on the same number of processes
restores every process's rows exactly, so it trains the groups the uninterrupted run would have, where it would
have. Resumed on another number of processes, every process
reads all the saved rows and keeps an even share of the groups (the next batch's plan may then move some rows); the
carried groups must fit in the new batch.

Files are written with `torch.save` and read with `weights_only=True`, so a checkpoint can hold nothing but
containers, numbers, strings and tensors.
"""

import json
import os
from dataclasses import asdict

import torch
from transformers.utils import logging

from .placement import NOWHERE, CarriedGroups, GeneratedRow, plan_carry_destinations

logger = logging.get_logger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
# Written by the main process; lists every carried row's process (older checkpoints: and its rewards).
CARRIED_FILE = "dynamic_sampling_carried_groups.pt"
# Written by each process: its own carried rows.
CARRIED_RANK_FILE = "dynamic_sampling_carried_groups.rank{rank}.pt"


def missing_rank_files(checkpoint_dir: str) -> list[str]:
    """The per-process files `CARRIED_FILE` names that `checkpoint_dir` lacks (all of them for a file from before
    carried rows were kept per process, which holds the rows themselves and needs none)."""
    manifest = torch.load(os.path.join(checkpoint_dir, CARRIED_FILE), weights_only=True)
    if not isinstance(manifest, dict):
        return []
    names = [CARRIED_RANK_FILE.format(rank=rank) for rank in range(manifest["num_processes"])]
    return [name for name in names if not os.path.isfile(os.path.join(checkpoint_dir, name))]


def save_sampler_state(sampler, checkpoint_dir: str) -> None:
    """Writes the sampler's state into `checkpoint_dir`; called by every process (it gathers)."""
    trainer = sampler.trainer
    args = trainer.args
    rows_per_call = sampler.calls.learned_rows_per_call()
    if args.should_save and (sampler.enabled or rows_per_call is not None):
        state = {}
        if sampler.enabled:
            state = {
                "refill_sampler": sampler.refill.state_dict() if sampler.refill else None,
                "pass_rate_estimate": sampler.pass_rate.estimate,
                "skipping": sampler.skipper.state() if sampler.skipper else None,
            }
        with open(os.path.join(checkpoint_dir, STATE_FILE), "w") as state_file:
            json.dump({**state, "rows_per_call_after_oom": rows_per_call}, state_file)
    if sampler.skipper is not None and args.should_save:
        sampler.skipper.save(checkpoint_dir)
    if sampler.options.carry_surplus:
        save_carried_groups(sampler, checkpoint_dir)


def load_sampler_state(sampler, checkpoint_dir: str) -> None:
    path = os.path.join(checkpoint_dir, STATE_FILE)
    if not os.path.exists(path):
        return
    with open(path) as state_file:
        state = json.load(state_file)
    sampler.calls.learned_cap = state.get("rows_per_call_after_oom")
    if not sampler.enabled or "refill_sampler" not in state:
        return
    if state["refill_sampler"] is not None and sampler.refill is not None:
        sampler.refill.load_state_dict(state["refill_sampler"])
    sampler.pass_rate.estimate = state["pass_rate_estimate"]
    if sampler.skipper is not None:
        sampler.skipper.load(state.get("skipping"), checkpoint_dir)
    if sampler.options.carry_surplus:
        sampler.carried = load_carried_groups(sampler.trainer, checkpoint_dir)


def save_carried_groups(sampler, checkpoint_dir: str) -> None:
    """Every process writes its carried rows; the main process writes `CARRIED_FILE`. Saved even when nothing is
    carried, so that a carrying run's checkpoint without these files reads as incomplete. Ends with a barrier, so
    that transformers writes `trainer_state.json` (the mark of a complete checkpoint) after every file."""
    trainer, carried = sampler.trainer, sampler.carried
    os.makedirs(checkpoint_dir, exist_ok=True)
    rank = trainer.accelerator.process_index
    rows = [(group, row, asdict(record)) for (group, row), record in sorted(carried.rows.items())]
    torch.save(rows, os.path.join(checkpoint_dir, CARRIED_RANK_FILE.format(rank=rank)))
    if trainer.args.should_save:
        manifest = {
            "num_processes": trainer.accelerator.num_processes,
            "group_size": trainer.num_generations,
            "holders": carried.holders,
        }
        torch.save(manifest, os.path.join(checkpoint_dir, CARRIED_FILE))
    trainer.accelerator.wait_for_everyone()


def load_carried_groups(trainer, checkpoint_dir: str) -> CarriedGroups:
    path = os.path.join(checkpoint_dir, CARRIED_FILE)
    if not os.path.isfile(path):
        logger.warning(
            f"dynamic_sampling_carry_surplus: the checkpoint {checkpoint_dir} has no carried groups "
            f"({CARRIED_FILE}); it was saved without carrying, so the resumed run starts with none carried."
        )
        return CarriedGroups()
    manifest = torch.load(path, weights_only=True)
    group_size = trainer.num_generations
    if not isinstance(manifest, dict):
        # A checkpoint from before carried rows were kept per process: the main process saved every row, with its
        # rewards, here.
        return _share_of(trainer, _whole_groups(manifest, group_size, path))
    if manifest["group_size"] != group_size:
        raise ValueError(
            f"{path} holds carried groups of num_generations={manifest['group_size']}, this run has "
            f"num_generations={group_size}; resume with the num_generations the checkpoint was saved with."
        )
    rank, num_processes = trainer.accelerator.process_index, trainer.accelerator.num_processes
    if manifest["num_processes"] == num_processes:
        saved = torch.load(os.path.join(checkpoint_dir, CARRIED_RANK_FILE.format(rank=rank)), weights_only=True)
        return CarriedGroups(
            holders=[list(group) for group in manifest["holders"]],
            rows={(group, row): _row(manifest, group, row, fields) for group, row, fields in saved},
        )
    rows = {}
    for saved_rank in range(manifest["num_processes"]):
        saved_path = os.path.join(checkpoint_dir, CARRIED_RANK_FILE.format(rank=saved_rank))
        for group, row, fields in torch.load(saved_path, weights_only=True):
            rows[group, row] = _row(manifest, group, row, fields)
    groups = [[rows[group, row] for row in range(group_size)] for group in range(len(manifest["holders"]))]
    return _share_of(trainer, groups)


def _row(manifest: dict, group: int, row: int, fields: dict) -> GeneratedRow:
    """A saved carried row; a checkpoint written while every process knew every row's rewards keeps them in the
    manifest instead of the row."""
    if manifest.get("rewards") is not None and fields.get("rewards") is None:
        fields = {**fields, "rewards": manifest["rewards"][group * manifest["group_size"] + row]}
    return _as_row(fields)


def _whole_groups(rows: list[dict], group_size: int, path: str) -> list[list[dict]]:
    if len(rows) % group_size:
        raise ValueError(
            f"{path} holds {len(rows)} carried rows, not whole groups of num_generations={group_size}; resume with "
            "the num_generations the checkpoint was saved with."
        )
    return [rows[start : start + group_size] for start in range(0, len(rows), group_size)]


def _share_of(trainer, groups: list[list[dict | GeneratedRow]]) -> CarriedGroups:
    """This process's even share of carried groups saved by another number of processes."""
    if not groups:
        return CarriedGroups()
    group_size = trainer.num_generations
    rows_per_process = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    num_processes = trainer.accelerator.num_processes
    batch_groups = rows_per_process * num_processes // group_size
    if len(groups) > batch_groups:
        raise ValueError(
            f"The checkpoint carries {len(groups)} groups into the next batch, which holds {batch_groups} groups on "
            f"{num_processes} processes; resume on the number of processes the checkpoint was saved with, or with "
            "a generation batch of at least as many groups."
        )
    destinations = plan_carry_destinations(
        [[NOWHERE] * group_size for _ in groups], batch_groups, rows_per_process, num_processes
    )
    rank = trainer.accelerator.process_index
    return CarriedGroups(
        holders=destinations,
        rows={
            (group, row): _as_row(groups[group][row])
            for group, targets in enumerate(destinations)
            for row, target in enumerate(targets)
            if target == rank
        },
    )


def _as_row(saved: dict | GeneratedRow) -> GeneratedRow:
    if isinstance(saved, GeneratedRow):
        return saved
    rewards = saved.get("rewards")
    # Checkpoints written before rows carried plain floats hold a tensor.
    return GeneratedRow(**{**saved, "rewards": rewards.tolist() if isinstance(rewards, torch.Tensor) else rewards})
