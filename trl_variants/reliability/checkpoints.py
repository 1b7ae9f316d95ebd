"""Which `checkpoint-*` folders were completely written, so that a resume never picks a half-written one.

transformers writes a checkpoint in place and picks the highest-numbered `checkpoint-*` folder on
`resume_from_checkpoint=True` whatever it holds. A run killed while saving leaves a folder without
`trainer_state.json` (written last), and resuming from it crashes, every time, until the folder is removed by hand.
"""

import json
import os
import re

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging

from ..dynamic_sampling.checkpoint import CARRIED_FILE, MANIFEST_FILE, manifest_files
from ..dynamic_sampling.checkpoint import STATE_FILE as DYNAMIC_SAMPLING_STATE_FILE
from ..experimental.prompt_skipping.skipper import HISTORY_FILE as PROMPT_HISTORY_FILE

logger = logging.get_logger(__name__)

# transformers' JIT checkpoint (`enable_jit_checkpoint=True`, on SIGTERM) creates this file first and deletes it
# once the checkpoint is written.
JIT_INCOMPLETE_MARKER = "checkpoint-is-incomplete.txt"
_CHECKPOINT_NAME = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def checkpoint_problems(checkpoint_dir: str) -> list[str]:
    """Why `checkpoint_dir` was not completely written, or `[]` when it was: it is complete when
    `trainer_state.json` (written last) parses, transformers' JIT-checkpoint marker is gone, and every dynamic-sampling
    file (written first) its manifest lists is there. A checkpoint written before manifests existed needs, for a run
    that logged dynamic-sampling metrics, the dynamic-sampling state, with the prompt history when it logged
    prompt-skipping metrics and the carried groups when it logged carrying metrics."""
    state_path = os.path.join(checkpoint_dir, TRAINER_STATE_NAME)
    if not os.path.isfile(state_path):
        return [f"{TRAINER_STATE_NAME} is missing"]
    try:
        with open(state_path) as state_file:
            state = json.load(state_file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return [f"{TRAINER_STATE_NAME} is not valid JSON ({error})"]
    problems = []
    if os.path.exists(os.path.join(checkpoint_dir, JIT_INCOMPLETE_MARKER)):
        problems.append(f"it still holds transformers' {JIT_INCOMPLETE_MARKER} marker")
    try:
        listed = manifest_files(checkpoint_dir)
    except (ValueError, KeyError, TypeError) as error:  # not JSON, or not {"files": [...]}
        return [*problems, f"{MANIFEST_FILE} is not valid ({type(error).__name__}: {error})"]
    if listed is not None:
        needed = {name: f"{MANIFEST_FILE} lists it" for name in listed}
    else:  # written before manifests existed: the files the metrics its run logged imply
        logged = {key for entry in state.get("log_history", []) for key in entry}
        sampled = any(key.startswith("dynamic_sampling/") for key in logged)
        implied = (
            (DYNAMIC_SAMPLING_STATE_FILE, sampled, "used dynamic sampling"),
            (PROMPT_HISTORY_FILE, "dynamic_sampling/skipped_prompts" in logged, "skipped degenerate prompts"),
            (CARRIED_FILE, "dynamic_sampling/carried_groups" in logged, "carried surplus groups"),
        )
        needed = {name: f"the run {what}" for name, logged_it, what in implied if logged_it}
    missing = [name for name in needed if not os.path.isfile(os.path.join(checkpoint_dir, name))]
    return problems + [f"{name} is missing although {needed[name]}" for name in missing]


def checkpoints_newest_first(output_dir: str) -> list[str]:
    """The `checkpoint-<step>` folders in `output_dir`, highest step first."""
    if not os.path.isdir(output_dir):
        return []
    steps = {}
    for name in os.listdir(output_dir):
        match = _CHECKPOINT_NAME.match(name)
        if match and os.path.isdir(os.path.join(output_dir, name)):
            steps[os.path.join(output_dir, name)] = int(match.group(1))
    return sorted(steps, key=steps.get, reverse=True)


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The highest-step complete checkpoint in `output_dir` (see `checkpoint_problems`), or `None`.

    Use it in place of transformers' `get_last_checkpoint`, which returns the highest-step folder even when a
    killed run left it half-written.
    """
    for checkpoint_dir in checkpoints_newest_first(output_dir):
        problems = checkpoint_problems(checkpoint_dir)
        if not problems:
            return checkpoint_dir
        logger.warning(
            f"Skipping the incomplete checkpoint {checkpoint_dir} ({'; '.join(problems)}): it was probably "
            "interrupted while being written."
        )
    return None
