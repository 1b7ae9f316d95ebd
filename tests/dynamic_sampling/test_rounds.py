"""Phase 1's generation calls without a model: a round is one call, and the metric gathers are skipped."""

from trl_variants.dynamic_sampling.rounds import GenerationRoundsMixin, metric_gathers_skipped


def test_a_round_is_one_call_holding_its_segments_for_every_backend():
    dataloader, refills = [None] * 8, [7] * 12
    assert GenerationRoundsMixin._round_calls(None, [dataloader, refills]) == [[dataloader, refills]]
    # An empty refill segment (nothing drawn) is left out; groups straddling processes come as one segment.
    assert GenerationRoundsMixin._round_calls(None, [dataloader, []]) == [[dataloader]]
    assert GenerationRoundsMixin._round_calls(None, [list(range(24))]) == [[list(range(24))]]


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
