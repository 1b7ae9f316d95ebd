"""The variant comparison on a task with several difficulty levels, before the graded task itself is installed:
a stand-in `trl_variants.toy.graded` with the graded interface, built from the addition task, two levels."""

import json
import sys
import types
from dataclasses import dataclass

import pytest

from trl_variants.toy import greedy_accuracy, make_toy_task
from trl_variants.toy.data import to_dataset


@dataclass
class StandInGradedTask:
    model: object
    tokenizer: object
    train_dataset: object
    train_problems: list
    eval_problems: list
    levels: list
    max_completion_length: int
    reward_funcs: list

    def held_out_accuracy_by_level(self, model=None):
        model = model or self.model
        return {level: greedy_accuracy(model, self.tokenizer, [p for p in self.eval_problems if p["level"] == level])
                for level in self.levels}


def make_stand_in_task(seed=0, warm_start_steps=20, hidden_size=64, num_layers=2):
    toy = make_toy_task(seed=seed, warm_start_steps=warm_start_steps, hidden_size=hidden_size, num_layers=num_layers)

    def levelled(problems):  # level 1: one-digit sums, level 2: two-digit sums
        return [{**p, "level": 1 if len(p["answer"]) == 1 else 2} for p in problems]

    train, held_out = levelled(toy.train_problems), levelled(toy.eval_problems)
    return StandInGradedTask(toy.model, toy.tokenizer, to_dataset(train), train, held_out, [1, 2], 4, toy.reward_funcs)


@pytest.fixture
def compare_variants(monkeypatch):
    from tests.test_benchmarks_smoke import BENCHMARKS

    if "trl_variants.toy.graded" in sys.modules or _graded_installed():
        pytest.skip("the real graded task is installed; test_benchmarks_smoke covers it")
    module = types.ModuleType("trl_variants.toy.graded")
    module.make_graded_task = make_stand_in_task
    monkeypatch.setitem(sys.modules, "trl_variants.toy.graded", module)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import compare_variants

    return compare_variants


def _graded_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl_variants.toy.graded") is not None


def test_levels_are_reported_and_weighted_into_the_overall_accuracy(compare_variants, tmp_path):
    # One worker: the stand-in module lives in this process only.
    argv = ["--smoke", "--workers", "1", "--variants", "grpo", "dapo_skip", "--output_dir", str(tmp_path)]
    assert compare_variants.main(argv) == 0

    report = json.loads((tmp_path / "variants.json").read_text())
    assert report["task"] == "graded" and report["levels"] == [1, 2]
    counts = report["level_counts"]
    assert report["settings"]["max_completion_length"] == 4  # the task's own limit
    for run in report["runs"]:
        by_level = run["accuracy_by_level"]
        for index, overall in enumerate(run["accuracy"]):
            weighted = sum(by_level[level][index] * count for level, count in counts.items()) / sum(counts.values())
            assert overall == pytest.approx(weighted)
    table = (tmp_path / "variants.md").read_text()
    assert f"final, level 1 ({counts['1']} problems)" in table and f"final, level 2 ({counts['2']} problems)" in table
