"""The allowed range of every numeric config field a user commonly sets, as one table, and a pure check against it.

Without it, `learning_rate=-1e-6` fails in the optimizer after the model has loaded, and `temperature=0` divides
the logits by zero. One table serves every config class (the package's fields, TRL's `GRPOConfig` and `ModelConfig`
fields, the `TrainingArguments` fields a GRPO run uses; a field the checked object lacks is skipped); where TRL or
transformers check a field too, the range here is never narrower than what they accept as meaningful. Cross-field
rules stay with the config classes; types are checked first (`config_checks.check_field_types`).
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Allowed values of one numeric field: `low`/`high` bounds (each inclusive or not), whether it must be an
    integer, whether `None` is allowed, and `also`, single values allowed outside the bounds (e.g. -1 for "unset")."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    integer: bool = False
    optional: bool = False
    also: tuple[float, ...] = ()
    why: str = ""

    def contains(self, value) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if value in self.also:
            return True
        if math.isnan(value) or (self.integer and value != int(value)):
            return False
        if self.low is not None and not (value >= self.low if self.low_inclusive else value > self.low):
            return False
        if self.high is not None and not (value <= self.high if self.high_inclusive else value < self.high):
            return False
        return True

    def describe(self) -> str:
        """E.g. "an integer >= 1", ">= 0", "a value with 0 <= value < 1", with the extra values and the reason."""
        low = None if self.low is None else f"{_number(self.low)} {'<=' if self.low_inclusive else '<'} value"
        high = None if self.high is None else f"value {'<=' if self.high_inclusive else '<'} {_number(self.high)}"
        kind = "an integer" if self.integer else "a value"
        if low and high:
            text = f"{kind} with {low.removesuffix(' value')} value {high.removeprefix('value ')}"
        elif low or high:
            bound = f"{'>=' if self.low_inclusive else '>'} {_number(self.low)}" if low else high.replace("value ", "")
            text = f"an integer {bound}" if self.integer else bound
        else:
            text = "an integer" if self.integer else "a number"
        text += "".join(f", or {_number(value)}" for value in self.also)
        if self.optional:
            text += ", or None"
        return text + (f" ({self.why})" if self.why else "")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def at_least(low: float, **kwargs) -> Range:
    return Range(low=low, **kwargs)


def above(low: float, **kwargs) -> Range:
    return Range(low=low, low_inclusive=False, **kwargs)


def count(low: int = 1, **kwargs) -> Range:
    return Range(low=low, integer=True, **kwargs)


def probability(**kwargs) -> Range:
    return Range(low=0.0, high=1.0, **kwargs)


# A logging, evaluation or saving interval: a step count, or below 1 a fraction of the total training steps.
INTERVAL = above(0, why="a step count, or below 1 a fraction of the training steps")

FIELD_RANGES: dict[str, Range] = {
    # transformers TrainingArguments: optimisation and schedule.
    "learning_rate": at_least(0),
    "per_device_train_batch_size": count(),
    "per_device_eval_batch_size": count(),
    "gradient_accumulation_steps": count(),
    "num_train_epochs": above(0),
    "max_steps": count(also=(-1,), why="trains for num_train_epochs"),
    "warmup_steps": at_least(0, why="a step count, or below 1 a fraction of the training steps"),
    "weight_decay": at_least(0),
    "adam_beta1": Range(low=0.0, high=1.0, high_inclusive=False),
    "adam_beta2": Range(low=0.0, high=1.0, high_inclusive=False),
    "adam_epsilon": at_least(0),
    "max_grad_norm": at_least(0, why="0 turns gradient clipping off"),
    "label_smoothing_factor": Range(low=0.0, high=1.0, high_inclusive=False),
    "logging_steps": INTERVAL,
    "eval_steps": Range(low=0, low_inclusive=False, optional=True, why=INTERVAL.why),
    "save_steps": INTERVAL,
    "save_total_limit": count(optional=True),
    "seed": Range(low=0, high=2**32 - 1, integer=True),
    "data_seed": Range(low=0, high=2**32 - 1, integer=True, optional=True),
    "dataloader_num_workers": count(0),
    # trl-variants' script arguments: a reasoning-gym task as the dataset.
    "reasoning_gym_size": count(),
    "reasoning_gym_seed": Range(low=0, high=2**32 - 1, integer=True),
    # TRL GRPOConfig: generation.
    "num_generations": count(2, why="group-relative advantages need two completions per prompt"),
    "num_generations_eval": count(1, optional=True),
    "max_completion_length": count(optional=True),
    "generation_batch_size": count(optional=True),
    "steps_per_generation": count(optional=True),
    "temperature": above(0),
    "top_p": Range(low=0.0, high=1.0, low_inclusive=False),
    "top_k": count(0, why="0 turns top-k filtering off"),
    "min_p": probability(optional=True),
    "repetition_penalty": above(0),
    # TRL GRPOConfig: loss.
    "beta": at_least(0),
    "num_iterations": count(),
    "epsilon": at_least(0),
    "epsilon_high": at_least(0, optional=True),
    "delta": above(0, optional=True),
    "top_entropy_quantile": probability(),
    "ref_model_mixup_alpha": probability(),
    "ref_model_sync_steps": count(),
    "vllm_importance_sampling_clip_max": above(0, optional=True),
    "vllm_importance_sampling_clip_min": at_least(0, optional=True),
    "num_completions_to_print": count(0, optional=True),
    # TRL GRPOConfig: vLLM.
    "vllm_gpu_memory_utilization": Range(low=0.0, high=1.0, low_inclusive=False),
    "vllm_tensor_parallel_size": count(),
    "vllm_max_model_length": count(optional=True),
    "vllm_server_timeout": above(0),
    # TRL ModelConfig: LoRA.
    "lora_r": count(),
    "lora_alpha": above(0),
    "lora_dropout": Range(low=0.0, high=1.0, high_inclusive=False),
    # DAPOConfig.
    "overlong_penalty_factor": at_least(0),
    "dynamic_sampling_tolerance": at_least(0),
    "dynamic_sampling_max_rounds": count(),
    "max_rows_per_generate_call": count(optional=True),
    "skip_target_degenerate_share": Range(low=0.0, high=1.0, high_inclusive=False),
    "skip_memory_epochs": above(0),
    "skip_probability_step": Range(low=0.0, high=1.0, low_inclusive=False),
    "skip_min_explore_probability": Range(
        low=0.0, high=1.0, low_inclusive=False, why="0 would stop exploring skipped prompts for good"
    ),
}


def range_problem(field_name: str, value, ranges: dict[str, Range] = FIELD_RANGES) -> str | None:
    """The one-line message for `value` outside `field_name`'s range, or `None` when it is allowed or unlisted."""
    allowed = ranges.get(field_name)
    if allowed is None or allowed.contains(value):
        return None
    return f"{field_name}={value!r} is not allowed; expected {allowed.describe()}."


def first_range_problem(config, ranges: dict[str, Range] = FIELD_RANGES) -> str | None:
    """The message for the first field of `config` (any object with attributes) outside its range, or `None`."""
    for field_name in ranges:
        if hasattr(config, field_name):
            problem = range_problem(field_name, getattr(config, field_name), ranges)
            if problem is not None:
                return problem
    return None


def check_field_ranges(config, ranges: dict[str, Range] = FIELD_RANGES) -> None:
    """Raises `ValueError` naming the field, the value and the allowed range for the first value out of range."""
    problem = first_range_problem(config, ranges)
    if problem is not None:
        raise ValueError(problem)
