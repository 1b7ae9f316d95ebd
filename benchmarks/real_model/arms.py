"""What the real-model benchmark and its report share: the four arms (names, labels, and the trainer and config each
trains with) and the folder their result files go to."""

import os

from benchmarks.shared.settings import DAPO_AS_PUBLISHED

# One result file per (arm, seed), and under runs/ (ignored by git) each run's checkpoints and log.
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

ARMS = {
    "grpo": "GRPO (`GRPOTrainer`, TRL's defaults)",
    "dapo": "DAPO as published (`DAPOTrainer`, skipping and carrying off)",
    "dapo_skip_carry": "DAPO + skipping + carrying",
    "dr_grpo": "Dr.GRPO (`DrGRPOTrainer` defaults)",
}
SKIP_AND_CARRY = {"skip_degenerate_prompts": True, "dynamic_sampling_carry_surplus": True}


def arm_trainer_and_config(arm: str, output_dir: str, shared: dict):
    from trl import GRPOConfig, GRPOTrainer

    from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

    if arm == "grpo":
        return GRPOTrainer, GRPOConfig(output_dir, **shared)
    if arm == "dapo":  # the `dapo` arm ran when skipping and carrying were off by default: both off by name
        return DAPOTrainer, DAPOConfig(output_dir, **DAPO_AS_PUBLISHED, **shared)
    if arm == "dapo_skip_carry":
        return DAPOTrainer, DAPOConfig(output_dir, **SKIP_AND_CARRY, **shared)
    if arm == "dr_grpo":
        return DrGRPOTrainer, DrGRPOConfig(output_dir, **shared)
    raise ValueError(f"--arm {arm!r} is not an arm; expected one of {list(ARMS)}.")
