"""Phase 1's generation calls without a model: how a round is split into calls, and the metric gathers skipped."""

from types import SimpleNamespace

from trl_variants.dynamic_sampling.rounds import GenerationRoundsMixin, metric_gathers_skipped


def rounds_of(use_vllm: bool, num_processes: int = 2, num_generations: int = 4) -> SimpleNamespace:
    return SimpleNamespace(
        use_vllm=use_vllm, num_generations=num_generations, accelerator=SimpleNamespace(num_processes=num_processes)
    )


def test_plain_generation_gets_one_generation_batch_per_call_and_vllm_the_whole_round():
    dataloader, refills = [None] * 8, [7] * 12
    plain = GenerationRoundsMixin._round_calls(rounds_of(False), [dataloader, refills], 8)
    assert plain == [[dataloader], [[7] * 8], [[7] * 4]]
    vllm = GenerationRoundsMixin._round_calls(rounds_of(True), [dataloader, []], 8)
    assert vllm == [[dataloader]]
    assert GenerationRoundsMixin._round_calls(rounds_of(True), [dataloader, refills], 8) == [[dataloader, refills]]


def test_plain_generation_calls_give_every_process_whole_groups_when_groups_straddle_processes():
    # Two processes of six rows, groups of four: a batch is three groups; a call holds four, two per process.
    segment = list(range(6 * 4))
    calls = GenerationRoundsMixin._round_calls(rounds_of(False), [segment], 12)
    assert calls == [[segment[:16]], [segment[16:]]]


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
