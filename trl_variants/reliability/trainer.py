"""`ReliabilityMixin`: clear errors for bad rewards and bad data, small datasets cycled, and resumes that never pick
a half-written checkpoint.

- Rewards: every reward-function call is checked (`reward_guard`); a failure on any process stops every process
  at the same point, after TRL's gather of the rewards, so no process is left waiting in a collective.
- Data: the datasets are checked at construction (`data_checks`); a dataset with fewer prompts than one
  generation batch is cycled instead of silently training for zero steps.
- Checkpoints: `train` resumes from the latest *complete* checkpoint (`checkpoints`: transformers would pick a
  half-written one), and refuses an explicit path to an incomplete one with an error naming the complete alternative.
"""

import os

import torch
from accelerate.utils import gather
from transformers.utils import logging

from ..dynamic_sampling.trl_hooks import reward_funcs_replaced
from .checkpoints import checkpoint_problems, last_complete_checkpoint
from .data_checks import dataset_problems, resumable_sampler
from .reward_guard import RewardFailure, failure_error, guard_reward_funcs

logger = logging.get_logger(__name__)


class ReliabilityMixin:
    """Adds the reward guard, the dataset checks, small-dataset cycling and complete-checkpoint resumes to a
    `GRPOTrainer` subclass. `setup_reliability_checks` must run right after `GRPOTrainer.__init__`."""

    def setup_reliability_checks(self) -> None:
        # With a rollout function, reward functions may read fields the rollout adds, which no dataset shows.
        reward_funcs, names = (self.reward_funcs, self.reward_func_names) if self.rollout_func is None else ([], [])
        datasets = {"train_dataset": self.train_dataset}
        if isinstance(self.eval_dataset, dict):
            datasets.update({f"eval_dataset[{name!r}]": dataset for name, dataset in self.eval_dataset.items()})
        else:
            datasets["eval_dataset"] = self.eval_dataset
        problems = []
        for dataset_name, dataset in datasets.items():
            if dataset is not None:
                problems += dataset_problems(dataset, dataset_name, reward_funcs, names)
        if len(problems) == 1:
            raise ValueError(problems[0])
        if problems:
            listed = "".join(f"\n- {problem}" for problem in problems)
            raise ValueError(f"The datasets cannot be trained on:{listed}")
        prompts_per_batch = self.args.generation_batch_size // self.num_generations
        if hasattr(self.train_dataset, "__len__") and len(self.train_dataset) < prompts_per_batch:
            logger.warning(
                f"train_dataset has {len(self.train_dataset)} prompts, fewer than the {prompts_per_batch} of one "
                "generation batch; it is cycled, so every batch repeats prompts and an epoch is one batch."
            )

    def _get_train_sampler(self, dataset=None):
        return resumable_sampler(super()._get_train_sampler(dataset))

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        failures: list[RewardFailure] = []
        # The guards live only for this call, so `self.reward_funcs` keeps the user's objects everywhere else.
        with reward_funcs_replaced(self, guard_reward_funcs(self.reward_funcs, self.reward_func_names, failures)):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # Every process reaches this exchange once per reward computation, whether its rewards failed or not.
        flag = torch.tensor([1.0 if failures else 0.0], device=self.accelerator.device)
        failed_ranks = torch.nonzero(gather(flag)).flatten().tolist()
        if failed_ranks:
            raise failure_error(failures, failed_ranks, self.accelerator.process_index)
        return rewards_per_func

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        if resume_from_checkpoint:
            resume_from_checkpoint = self._complete_checkpoint(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _complete_checkpoint(self, requested) -> str:
        if isinstance(requested, bool):
            output_dir = self.args.output_dir
            complete = last_complete_checkpoint(output_dir)
            if complete:
                return complete
            raise ValueError(
                f"resume_from_checkpoint=True found no complete checkpoint in output_dir={output_dir!r}. Start "
                "without resume_from_checkpoint, or point output_dir at the folder holding the run's checkpoints."
            )
        requested = os.fspath(requested)
        if not os.path.isdir(requested):
            return requested  # transformers reports a missing folder itself
        problems = checkpoint_problems(requested)
        if problems:
            alternative = last_complete_checkpoint(os.path.dirname(os.path.abspath(requested)))
            if alternative:
                hint = f"The latest complete checkpoint next to it is {alternative!r}; resume from that one."
            else:
                hint = "No complete checkpoint is next to it; start the run without resume_from_checkpoint."
            raise ValueError(
                f"resume_from_checkpoint={requested!r} is incomplete ({'; '.join(problems)}): the run was probably "
                f"stopped while saving it, and resuming would restart from a partial state. {hint}"
            )
        return requested
