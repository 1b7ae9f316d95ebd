"""A real-model run that may take several sittings: what `train_and_evaluate(..., resume=True)` keeps in its output
folder while it is unfinished, and reads back when called again on it.

    checkpoint-N/             the last optimizer step, complete (TRL's checkpoint, with the package's
                              dynamic-sampling state; one is written after every step and only the last is kept)
    before_evaluation.json    the held-out pass rate measured before training
    training_log.jsonl        one record per step (the caller's `log_path`), cut back to the checkpoint's step

A later sitting loads the checkpoint through transformers' `resume_from_checkpoint`, so it trains the steps after
it exactly as a run never stopped would have. The checkpoints and the evaluation file are removed once the run is
done; the log stays.
"""

import dataclasses
import json
import os
import shutil
from pathlib import Path

from ..reliability.checkpoints import checkpoints_newest_first, last_complete_checkpoint
from .evaluation import PassRate

# A checkpoint after every optimizer step, the last one only: an interrupt loses at most the step under way.
CHECKPOINT_EVERY_STEP = {"save_strategy": "steps", "save_steps": 1, "save_total_limit": 1}
BEFORE_FILE = "before_evaluation.json"


@dataclasses.dataclass
class EarlierSittings:
    """What earlier sittings left in a run's folder: the checkpoint to resume from (`None`: start at step 0), the
    evaluation before training (`None`: not measured yet) and the log records up to the checkpoint's step."""

    checkpoint: str | None
    before: PassRate | None
    records: list[dict]

    @property
    def step(self) -> int:
        return checkpoint_step(self.checkpoint)


def checkpoint_step(checkpoint: str | None) -> int:
    return 0 if checkpoint is None else int(Path(checkpoint).name.rsplit("-", 1)[1])


def earlier_sittings(folder: str | os.PathLike, log_path: str | os.PathLike | None) -> EarlierSittings:
    """Reads what earlier sittings kept in `folder`, and cuts the log at `log_path` back to the steps the last
    complete checkpoint holds (a step logged, then interrupted before its checkpoint was whole, is trained again)."""
    checkpoint = last_complete_checkpoint(str(folder))
    before_path = Path(folder) / BEFORE_FILE
    before = PassRate(**json.loads(before_path.read_text(encoding="utf-8"))) if before_path.is_file() else None
    records = _cut_log(Path(log_path), checkpoint_step(checkpoint)) if log_path is not None else []
    return EarlierSittings(checkpoint, before, records)


def keep_before(folder: str | os.PathLike, before: PassRate) -> None:
    _write_atomically(Path(folder) / BEFORE_FILE, json.dumps(dataclasses.asdict(before), indent=2) + "\n")


def remove_sitting_files(folder: str | os.PathLike) -> None:
    """Removes the checkpoints and the evaluation file of a finished run."""
    for checkpoint in checkpoints_newest_first(str(folder)):
        shutil.rmtree(checkpoint)
    (Path(folder) / BEFORE_FILE).unlink(missing_ok=True)


def _cut_log(log_path: Path, step: int) -> list[dict]:
    if not log_path.is_file():
        return []
    lines = [line for line in log_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):  # only the last line can have been cut short by the interrupt
                raise ValueError(f"{log_path}: line {number} is not JSON; it was not written by this run.") from None
    kept = [record for record in records if record["step"] <= step]
    if len(kept) != len(lines):
        _write_atomically(log_path, "".join(json.dumps(record) + "\n" for record in kept))
    return kept


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)


def kept_work(folder: str | os.PathLike, steps: int) -> str:
    """What an interrupted run of `steps` steps kept in `folder`, in a sentence."""
    step = checkpoint_step(last_complete_checkpoint(str(folder)))
    if step >= steps:
        return (f"all {steps} steps kept, with the log and the last checkpoint, in {folder}/; resuming evaluates "
                "the trained model and saves it")
    if step > 0:
        done = "step 1" if step == 1 else f"steps 1-{step}"
        return f"{done} of {steps} kept, with the log and the checkpoint of step {step}, in {folder}/"
    if (Path(folder) / BEFORE_FILE).is_file():
        return f"no step had finished; the evaluation before training is kept in {folder}/"
    return f"nothing had finished yet; {folder}/ holds the run's settings"
