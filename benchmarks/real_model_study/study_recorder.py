"""The study's per-run instrument: the first benchmark's `Recorder`, with the grid's shared step-0 evaluation in
place of measuring it again in every run (same weights, same generator seed: the same measurement)."""

from benchmarks.real_model.real_model_recorder import Recorder


class StudyRecorder(Recorder):
    """`Recorder` whose evaluation 0 is `shared_step0` (a `PassRate`); every later one is measured."""

    def __init__(self, path, header, probe, held_out, tokenizer, settings, deadline, shared_step0, previous=None):
        from .study import LOGGED

        self.shared_step0 = shared_step0
        super().__init__(path, header, probe, held_out, tokenizer, settings, LOGGED, deadline, previous)

    def _measure(self, index: int, model):
        return self.shared_step0 if index == 0 else super()._measure(index, model)
