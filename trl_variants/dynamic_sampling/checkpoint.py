"""Saving and restoring the dynamic sampler's state with a checkpoint: `save_sampler_state`, `load_sampler_state`.

`STATE_FILE` (JSON, written by the main process) holds the refill source's position, the pass-rate estimate, the
smallest generate-call cap an out-of-memory error taught any process (kept with dynamic sampling off too: it caps a
plain generation batch's call alike) and, with prompt skipping, the skipper's state (its arrays go to a file of
their own, experimental/prompt_skipping).

Carried groups (`dynamic_sampling_carry_surplus=True`): every process holds every carried row, so the main process
writes them all to `CARRIED_FILE` (rewards and generating log-probs included), and a run resumed on any number of
processes reads them back whole; the carried groups must fit in the new batch.

Files are written with `torch.save` and read with `weights_only=True`, so a checkpoint can hold nothing but
containers, numbers, strings and tensors. `MANIFEST_FILE`, written last, lists the files the state needs, which the
completeness check (reliability/checkpoints.py) reads.
"""

import json
import os
from dataclasses import asdict

import torch
from transformers.utils import logging

from ..experimental.prompt_skipping.skipper import HISTORY_FILE
from .sampler import GeneratedRow

logger = logging.get_logger(__name__)

STATE_FILE = "dynamic_sampling_state.json"
# Written by the main process: every carried row, in group order.
CARRIED_FILE = "dynamic_sampling_carried_groups.pt"
# Written by the main process after the files it lists: {"files": [the sampler's files this checkpoint needs]}.
MANIFEST_FILE = "dynamic_sampling_manifest.json"


def save_sampler_state(sampler, checkpoint_dir: str) -> None:
    """Writes the sampler's state into `checkpoint_dir`; called by every process (it gathers)."""
    trainer = sampler.trainer
    args = trainer.args
    rows_per_call = sampler.calls.learned_rows_per_call()
    files = []
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
        files.append(STATE_FILE)
    if sampler.skipper is not None and args.should_save:
        sampler.skipper.save(checkpoint_dir)
        files.append(HISTORY_FILE)
    if sampler.options.carry_surplus:
        save_carried_groups(sampler, checkpoint_dir)
        files.append(CARRIED_FILE)
    if args.should_save:
        with open(os.path.join(checkpoint_dir, MANIFEST_FILE), "w") as manifest_file:
            json.dump({"files": files}, manifest_file)


def manifest_files(checkpoint_dir: str) -> list[str] | None:
    """The sampler's files `checkpoint_dir`'s manifest lists, or `None` for a checkpoint written before manifests
    existed."""
    path = os.path.join(checkpoint_dir, MANIFEST_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as manifest_file:
        return list(json.load(manifest_file)["files"])


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
    """The main process writes every carried row to `CARRIED_FILE`, even when none is carried, so that a carrying
    run's checkpoint without it reads as incomplete."""
    if sampler.trainer.args.should_save:
        rows = [asdict(row) for group in sampler.carried for row in group]
        torch.save(rows, os.path.join(checkpoint_dir, CARRIED_FILE))


def load_carried_groups(trainer, checkpoint_dir: str) -> list[list[GeneratedRow]]:
    path = os.path.join(checkpoint_dir, CARRIED_FILE)
    if not os.path.isfile(path):
        logger.warning(
            f"dynamic_sampling_carry_surplus: the checkpoint {checkpoint_dir} has no carried groups "
            f"({CARRIED_FILE}); it was saved without carrying, so the resumed run starts with none carried."
        )
        return []
    saved = torch.load(path, weights_only=True)
    group_size = trainer.num_generations
    if len(saved) % group_size:
        raise ValueError(
            f"{path} holds {len(saved)} carried rows, not whole groups of num_generations={group_size}; resume with "
            "the num_generations the checkpoint was saved with."
        )
    batch_groups = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    batch_groups = batch_groups * trainer.accelerator.num_processes // group_size
    if len(saved) // group_size > batch_groups:
        raise ValueError(
            f"The checkpoint carries {len(saved) // group_size} groups into the next batch, which holds "
            f"{batch_groups} groups on {trainer.accelerator.num_processes} processes; resume with a generation batch "
            "of at least as many groups."
        )
    rows = [GeneratedRow(**fields) for fields in saved]
    return [rows[start : start + group_size] for start in range(0, len(rows), group_size)]

