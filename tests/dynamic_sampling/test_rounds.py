"""Phase 1's generation calls without a model: a round is one call, and the metric gathers are skipped."""

from types import SimpleNamespace

from trl_variants.dynamic_sampling.rounds import GenerationRoundsMixin
from trl_variants.dynamic_sampling.trl_hooks import metric_gathers_skipped


def rounds_of(num_processes: int = 2, num_generations: int = 4) -> SimpleNamespace:
    return SimpleNamespace(num_generations=num_generations, accelerator=SimpleNamespace(num_processes=num_processes))


def test_a_round_is_one_call_in_segments_of_one_generation_batch():
    dataloader, refills = [None] * 8, [7] * 12
    assert GenerationRoundsMixin._round_calls(rounds_of(), [dataloader, refills], 8) == [[dataloader, [7] * 8, [7] * 4]]
    # An empty refill segment (nothing drawn) adds nothing.
    assert GenerationRoundsMixin._round_calls(rounds_of(), [dataloader, []], 8) == [[dataloader]]


def test_segments_give_every_process_whole_groups_when_groups_straddle_processes():
    # Two processes of six rows, groups of four: a batch is three groups; a segment holds four, two per process.
    segment = list(range(6 * 4))
    assert GenerationRoundsMixin._round_calls(rounds_of(), [segment], 12) == [[segment[:16], segment[16:]]]


class Accelerator:
    def gather(self, tensor):
        return ("gathered", tensor)


def test_metric_gathers_are_local_inside_the_context_and_restored_after():
    accelerator = Accelerator()
    with metric_gathers_skipped(accelerator):
        assert accelerator.gather(3) == 3
    assert accelerator.gather(3) == ("gathered", 3)
    # An instance-level replacement made by someone else is put back, not dropped.
    accelerator.gather = lambda tensor: ("theirs", tensor)
    with metric_gathers_skipped(accelerator):
        assert accelerator.gather(3) == 3
    assert accelerator.gather(3) == ("theirs", 3)
