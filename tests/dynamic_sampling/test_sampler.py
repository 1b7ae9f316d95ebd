"""The dynamic sampler as a component: its decision as a plain API (no model, no trainer), and the state it keeps off
the trainer (private names, cross-mixin reads)."""

import ast
import inspect
from pathlib import Path

import pytest
import transformers
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer
from trl_variants.dynamic_sampling.sampler import call_order
from trl_variants.dynamic_sampling.selection import decide_round, groups_to_request

from ..helpers import toy_config, toy_trainer

PACKAGE = Path(__file__).resolve().parents[2] / "trl_variants"
# The most private names a DAPOTrainer may hold beyond a GRPOTrainer's (attributes and methods).
MAX_PRIVATE_NAMES = 15


# The decision, without a model: each generated group's informative flag, in generation order.

T, F = True, False


def test_the_first_informative_groups_are_trained_and_the_next_ones_carried():
    decision = decide_round([F, T, F, T, T, F, T, T], needed=4, fill=False, carry_capacity=4)
    assert not decision.short
    assert decision.trained == decision.kept == [1, 3, 4, 6]
    assert decision.carried == [7]
    assert decision.dropped == [] and decision.filled == []


def test_surplus_beyond_the_carry_capacity_is_dropped_and_nothing_is_carried_without_carrying():
    carrying = decide_round([T] * 8, needed=2, fill=False, carry_capacity=2)
    assert carrying.carried == [2, 3] and carrying.dropped == [4, 5, 6, 7]
    published = decide_round([T] * 8, needed=2, fill=False, carry_capacity=0)
    assert published.carried == [] and published.dropped == [2, 3, 4, 5, 6, 7]


def test_a_short_round_is_filled_with_the_earliest_degenerate_groups_only_when_asked():
    flags = [F, T, F, F, F]
    refused = decide_round(flags, needed=3, fill=False, carry_capacity=3)
    assert refused.short and refused.trained == [1]
    filled = decide_round(flags, needed=3, fill=True, carry_capacity=3)
    assert not filled.short
    assert filled.trained == [1, 0, 2] and filled.kept == [1] and filled.filled == [0, 2]


def test_an_asynchronous_caller_asks_for_more_prompts_until_the_batch_is_full():
    """How a caller without `GRPOTrainer` drives it: decide on what arrived, ask for more while short."""
    arrived, needed, batch_groups, processes = [T, F, F, F], 4, 4, 2
    requests = []
    while (decision := decide_round(arrived, needed, fill=False, carry_capacity=batch_groups)).short:
        informative = sum(arrived)
        request = groups_to_request(needed - informative, informative / len(arrived), batch_groups, processes)
        requests.append(request)
        arrived += [T, F] * (request // 2)  # half of each refill informative
    # 3 missing at a pass rate of 1/4, with the margin: 15 groups, rounded up to whole groups per process.
    assert requests == [16]
    assert len(decision.trained) == 4 and len(decision.carried) == 4 and len(decision.dropped) == 1


def test_bad_counts_are_refused_in_one_line():
    with pytest.raises(ValueError, match="decide_round: needed and carry_capacity must be >= 0, got -1 and 0"):
        decide_round([T], needed=-1, fill=False, carry_capacity=0)


def test_call_order_gives_each_process_its_share_of_every_segment():
    assert call_order([8], 2) == list(range(8))
    # Process 0 generates rows 0-1 of the first segment and row 4 of the second; process 1 the rest.
    assert call_order([4, 2], 2) == [0, 1, 4, 2, 3, 5]
    with pytest.raises(ValueError, match="call_order: every segment must split evenly over num_processes=2"):
        call_order([4, 3], 2)


# The state kept off the trainer.


def trainer_attributes() -> set[str]:
    """Every name `GRPOTrainer` (or transformers' `Trainer`) defines or sets on `self`."""
    names = {name for name in dir(GRPOTrainer)}
    for module in (inspect.getmodule(GRPOTrainer), transformers.trainer):
        tree = ast.parse(Path(inspect.getsourcefile(module)).read_text(encoding="utf-8"))
        names |= {
            node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            and isinstance(node.ctx, ast.Store)
        }  # fmt: skip
    return names


def private_reads(tree: ast.AST, receiver: str) -> list[ast.Attribute]:
    return [
        node for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == receiver
        and node.attr.startswith("_") and not node.attr.startswith("__")
    ]  # fmt: skip


def foreign_private_reads(tree: ast.AST, trl_names: set[str]) -> list[str]:
    """In the trainers and mixins of `tree`, each `self._name` read that is neither the class's own (a method, or an
    attribute it sets) nor TRL's; anywhere in `tree`, each `trainer._name` read that is not TRL's."""
    found = []
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
               and node.name.endswith(("Mixin", "Trainer"))]  # fmt: skip
    for cls in classes:
        own = {node.name for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        own |= {node.attr for node in private_reads(cls, "self") if isinstance(node.ctx, ast.Store)}
        found += [f"{node.lineno} {cls.name} reads self.{node.attr}" for node in private_reads(cls, "self")
                  if node.attr not in own | trl_names]  # fmt: skip
    found += [f"{node.lineno} reads trainer.{node.attr}" for node in private_reads(tree, "trainer")
              if node.attr not in trl_names]  # fmt: skip
    return found


def test_no_mixin_reads_a_private_name_another_mixin_defines():
    """In the trainers and their mixins, `self._name` is the class's own or TRL's; elsewhere, `trainer._name` is
    TRL's only: the dynamic sampler's state is reached through `trainer.dynamic_sampler`."""
    trl_names = trainer_attributes()
    found = [
        f"{path.relative_to(PACKAGE)}:{read}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for read in foreign_private_reads(ast.parse(path.read_text(encoding="utf-8")), trl_names)
    ]
    assert found == []


def test_the_check_sees_a_cross_mixin_read_and_a_private_read_through_trainer():
    source = (
        "class AMixin:\n    def f(self):\n        self._mine = 1\n"
        "        return self._theirs, self._mine, self._metrics\n"
        "def g(trainer):\n    return trainer._sampler, trainer._metrics\n"
    )
    assert foreign_private_reads(ast.parse(source), trainer_attributes()) == [
        "4 AMixin reads self._theirs",
        "6 reads trainer._sampler",
    ]


def private_names(trainer) -> set[str]:
    names = set(dir(trainer)) | set(vars(trainer))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


@pytest.mark.slow
def test_a_trained_dapo_trainer_adds_few_private_names_to_grpo_trainers(toy_task, tmp_path):
    """Against a trained `GRPOTrainer`: a future TRL attribute of the same name would collide silently, so the
    package keeps its state on the dynamic sampler."""
    grpo = toy_trainer(GRPOTrainer, toy_config(GRPOConfig, tmp_path / "grpo", max_steps=1), toy_task)
    grpo.train()
    config = toy_config(DAPOConfig, tmp_path / "dapo", max_steps=1, skip_degenerate_prompts=True)
    dapo = toy_trainer(DAPOTrainer, config, toy_task)
    dapo.train()
    added = sorted(private_names(dapo) - private_names(grpo))
    assert len(added) <= MAX_PRIVATE_NAMES, added
    assert "_dynamic_sampler" in added
