"""The carried rows' policy ratio metric (`dynamic_sampling/carried_ratio_mean`, `_max`), without a model; the
trainer runs in test_carry.py check it against snapshots of the policy."""

import math
from types import SimpleNamespace

import torch

from trl_variants.dynamic_sampling.carry import CARRIED_RATIO_MAX, CARRIED_RATIO_MEAN, CarriedRatioWindow, carried_ratio_sums


def test_sums_cover_only_the_carried_rows_loss_tokens():
    logps = torch.log(torch.tensor([[2.0, 3.0, 5.0], [7.0, 11.0, 13.0], [0.5, 0.25, 17.0]]))
    old = torch.zeros(3, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0]])
    carried = torch.tensor([True, False, True])
    total, count, largest = carried_ratio_sums(logps, old, mask, carried).tolist()
    # Row 1 is fresh; the masked tokens (5.0, 17.0) are padding or tool output.
    assert (count, largest) == (4.0, 3.0)
    assert math.isclose(total, 2.0 + 3.0 + 0.5 + 0.25, rel_tol=1e-6)
    none = carried_ratio_sums(logps, old, mask, torch.tensor([False, False, False])).tolist()
    assert none == [0.0, 0.0, -math.inf]


def test_a_window_combines_micro_batches_and_processes_then_empties():
    other_process = torch.tensor([[6.0, 2.0, 4.0]])  # sum, count, max of another process's carried tokens
    accelerator = SimpleNamespace(gather=lambda sums: torch.cat([sums, other_process]))
    window = CarriedRatioWindow()
    assert window.close(accelerator) is None  # a step without carried rows logs nothing
    mask, carried = torch.ones(1, 2), torch.tensor([True])
    window.add(torch.log(torch.tensor([[1.0, 2.0]])), torch.zeros(1, 2), mask, carried)
    window.add(torch.log(torch.tensor([[0.5, 1.5]])), torch.zeros(1, 2), mask, carried)
    metrics = window.close(accelerator)
    assert metrics.keys() == {CARRIED_RATIO_MEAN, CARRIED_RATIO_MAX}
    assert math.isclose(metrics[CARRIED_RATIO_MEAN], (1.0 + 2.0 + 0.5 + 1.5 + 6.0) / 6, rel_tol=1e-6)
    assert metrics[CARRIED_RATIO_MAX] == 4.0
    assert window.sums is None
    # Micro-batches that held the key but no carried token on any process log nothing either.
    window.add(torch.zeros(1, 2), torch.zeros(1, 2), mask, torch.tensor([False]))
    assert window.close(SimpleNamespace(gather=lambda sums: sums)) is None
