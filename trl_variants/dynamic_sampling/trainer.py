"""`DynamicSamplingMixin`: the `GRPOTrainer` overrides through which dynamic sampling runs. Each is a few lines
that call `super()` and delegate to the trainer's one `DynamicSampler` (sampler.py), which owns all the state.

sampler.py's docstring names the two phases of a step and the "drop" mode; docs/architecture.md follows one step
through the modules; docs/dynamic_sampling.md explains the mechanism and its guarantees.
"""

from .sampler import DynamicSampler, DynamicSamplingExhaustedError
from .selection import KEPT_ROWS_SCALE_KEY
from .trl_hooks import (
    carried_rows_in_loss,
    engine_awake_across_rounds,
    replay_row,
    replaying_generation_and_rewards,
    replaying_tools_and_environments,
    scoring_with_generating_logps,
    train_metrics,
)

__all__ = ["DynamicSamplingExhaustedError", "DynamicSamplingMixin"]


class DynamicSamplingMixin:
    """Adds DAPO's dynamic sampling to a `GRPOTrainer` subclass; `setup_dynamic_sampling` must run right after
    `GRPOTrainer.__init__`. Evaluation is never filtered. Overrides (each calling `super()`):
    `_generate_and_score_completions`, `_calculate_rewards`, `_compute_loss`, `_generate_single_turn`,
    `_get_dataloader`, `get_resumed_dataloader`, `_prepare_inputs`."""

    def setup_dynamic_sampling(self) -> None:
        self._dynamic_sampler = DynamicSampler(self)

    @property
    def dynamic_sampler(self) -> DynamicSampler:
        """The trainer's dynamic sampler: its options, pass rate, refill source, carried groups and call sizes."""
        return self._dynamic_sampler

    def _generate_and_score_completions(self, inputs):
        if not (self.args.dynamic_sampling and self.model.training):
            return super()._generate_and_score_completions(inputs)
        if self.args.dynamic_sampling == "drop":
            return self._dynamic_sampler.drop_flat_groups(super()._generate_and_score_completions(inputs))
        with engine_awake_across_rounds(self):
            batch = self._dynamic_sampler.sample_batch(inputs, super()._generate_and_score_completions)
        with (
            replaying_generation_and_rewards(self, batch.local),
            replaying_tools_and_environments(self, batch.local),
            scoring_with_generating_logps(self, batch.local, batch.carried_rows) as complete,
        ):
            return complete(super()._generate_and_score_completions([replay_row(row) for row in batch.local]))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.args.dynamic_sampling == "drop" and self.model.training:  # for `drop_flat_groups`, right after
            self._dynamic_sampler.scored_rewards = rewards
        return rewards

    def _compute_loss(self, model, inputs):
        carried_ratio = self._dynamic_sampler.carried_ratio
        with carried_rows_in_loss(self, inputs, carried_ratio.add):
            loss = super()._compute_loss(model, inputs)
        if KEPT_ROWS_SCALE_KEY in inputs:  # dynamic_sampling="drop" (1.0 for the token-normalised objectives)
            loss = loss * inputs[KEPT_ROWS_SCALE_KEY]
        # One gather per optimizer step, at its last micro-batch, and only in steps that trained carried rows.
        if self.accelerator.sync_gradients:
            for name, value in (carried_ratio.close(self.accelerator) or {}).items():
                train_metrics(self)[name].append(value)
        return loss

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        return self._dynamic_sampler.calls.generate_single_turn(
            super()._generate_single_turn, prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )

    def _get_dataloader(self, dataset, description, batch_size, sampler_fn=None, is_training=False, **kwargs):
        indices = self._dynamic_sampler.indices if is_training else None
        if indices is not None:
            sampler_fn = indices.wrap_sampler(sampler_fn, self.args)
        dataloader = super()._get_dataloader(dataset, description, batch_size, sampler_fn, is_training, **kwargs)
        if indices is not None:
            indices.check_dataloader(dataloader)
        return dataloader

    def get_resumed_dataloader(self, dataloader, num_batches: int):
        self._dynamic_sampler.indices.skip_batches(num_batches)
        return super().get_resumed_dataloader(dataloader, num_batches)

    def _prepare_inputs(self, generation_batch):
        if self.model.training:
            accelerator = self.accelerator
            self._dynamic_sampler.indices.pair_batch(
                generation_batch, accelerator.process_index, accelerator.num_processes
            )
        return super()._prepare_inputs(generation_batch)
