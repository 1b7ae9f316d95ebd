"""Phase 1's generation without a model: TRL's scoring pass stops right after `_generate`."""

from trl_variants.dynamic_sampling.trl_hooks import generate_like_trl


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
