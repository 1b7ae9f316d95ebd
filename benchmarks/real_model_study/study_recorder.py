"""The study's per-run instrument: the first benchmark's `Recorder`, with the grid's shared step-0 evaluation in
place of measuring it again in every run (same weights, same generator seed: the same measurement), and a list of the
attempts that made the run (an interrupted run resumed from its checkpoint has two)."""

import os
import time

from benchmarks.real_model.real_model_recorder import Recorder


class StudyRecorder(Recorder):
    """`Recorder` whose evaluation 0 is `shared_step0` (a `PassRate`); every later one is measured. Each process
    that trains the run appends to `record["attempts"]`: its commit, start time, load average and the step it
    resumed from."""

    def __init__(self, path, header, probe, held_out, tokenizer, settings, logged_keys, deadline, shared_step0,
                 previous=None):
        self.shared_step0 = shared_step0
        super().__init__(path, header, probe, held_out, tokenizer, settings, logged_keys, deadline, previous)
        self.record.setdefault("attempts", []).append({
            "commit": header["commit"], "machine": header["machine"], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": os.getloadavg()[0], "resumed_from_step": previous[1] if previous else 0,
        })  # fmt: skip

    def _measure(self, index: int, model):
        return self.shared_step0 if index == 0 else super()._measure(index, model)
