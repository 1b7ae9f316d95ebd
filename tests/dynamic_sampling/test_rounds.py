"""Phase 1's generation calls without a model: a round is one call, and the metric gathers are skipped (generation's
own gathers are not)."""

from types import SimpleNamespace

from trl_variants.dynamic_sampling.sampler import DynamicSampler
from trl_variants.dynamic_sampling.trl_hooks import generate_like_trl, metric_gathers_skipped


def rounds_of(num_processes: int = 2, num_generations: int = 4) -> DynamicSampler:
    """A sampler whose trainer has only what `round_calls` reads."""
    sampler = object.__new__(DynamicSampler)
    accelerator = SimpleNamespace(num_processes=num_processes)
    sampler.trainer = SimpleNamespace(num_generations=num_generations, accelerator=accelerator)
    return sampler


def test_a_round_is_one_call_in_segments_of_one_generation_batch():
    dataloader, refills = [None] * 8, [7] * 12
    assert rounds_of().round_calls([dataloader, refills], 8) == [[dataloader, [7] * 8, [7] * 4]]
    # An empty refill segment (nothing drawn) adds nothing.
    assert rounds_of().round_calls([dataloader, []], 8) == [[dataloader]]


def test_segments_give_every_process_whole_groups_when_groups_straddle_processes():
    # Two processes of six rows, groups of four: a batch is three groups; a segment holds four, two per process.
    segment = list(range(6 * 4))
    assert rounds_of().round_calls([segment], 12) == [[segment[:16], segment[16:]]]


class Accelerator:
    def gather(self, tensor):
        return ("gathered", tensor)


class Generating:
    """A trainer's generation surface: each method gathers, as a generation backend's collective would."""

    def __init__(self, rollout_func=None):
        self.accelerator = Accelerator()
        self.rollout_func = rollout_func

    def _generate_single_turn(self, tensor):
        return self.accelerator.gather(tensor)

    def _tool_call_loop(self, tensor):
        return self._generate_single_turn(tensor), self.accelerator.gather(tensor)


def test_metric_gathers_are_local_inside_the_context_and_restored_after():
    trainer = Generating()
    accelerator = trainer.accelerator
    with metric_gathers_skipped(trainer):
        assert accelerator.gather(3) == 3
    assert accelerator.gather(3) == ("gathered", 3)
    assert "_generate_single_turn" not in vars(trainer) and "_tool_call_loop" not in vars(trainer)
    # An instance-level replacement made by someone else is put back, not dropped.
    accelerator.gather = lambda tensor: ("theirs", tensor)
    with metric_gathers_skipped(trainer):
        assert accelerator.gather(3) == 3
    assert accelerator.gather(3) == ("theirs", 3)


def test_generation_keeps_the_real_gather_inside_the_context():
    trainer = Generating(rollout_func=lambda tensor: trainer.accelerator.gather(tensor))
    with metric_gathers_skipped(trainer):
        assert trainer._generate_single_turn(3) == ("gathered", 3)
        assert trainer._tool_call_loop(3) == (("gathered", 3), ("gathered", 3))
        assert trainer.rollout_func(3) == ("gathered", 3)
        # Back in `_generate`'s own frame after generation: the metric gathers are local again.
        assert trainer.accelerator.gather(3) == 3
    assert trainer.rollout_func(3) == ("gathered", 3)


def test_generation_stops_trl_scoring_even_through_an_except_exception():
    """`generate_like_trl` stops TRL's method right after `_generate`, even where a TRL release would wrap the call in
    `except Exception`; nothing after it runs."""
    ran_after = []

    class Trainer:
        tools = None

        def _generate(self, prompts):
            return [f"{prompt}!" for prompt in prompts]

        def generate_and_score(self, rows):
            try:
                self._generate(rows)
            except Exception:  # what a TRL release might add
                pass
            ran_after.append(True)

    trainer = Trainer()
    prompts, outputs, tools = generate_like_trl(trainer, trainer.generate_and_score, ["a", "b"])
    assert (prompts, outputs, tools, ran_after) == (["a", "b"], ["a!", "b!"], [None, None], [])
    assert "_generate" not in vars(trainer)
