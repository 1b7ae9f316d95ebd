"""The arithmetic of DAPO's dynamic sampling, free of any trainer state so it can be tested on its own.

A *group* is the `num_generations` completions of one prompt. It is *degenerate* when all its scores are equal
(all right or all wrong): its group-relative advantages are zero and it carries no gradient. Dynamic sampling
trains only on *informative* groups and generates more prompts until the batch is full of them.

Here: the informative flags (`informative_group_mask`), the modes (`dynamic_sampling_mode`) and "drop"'s loss
scale (`kept_rows_loss_scale`), the size of each round (`groups_to_request`, `first_round_extra_groups`), the
options (`resolve_sampling_options`; the defaults follow the real-model study, docs/dynamic_sampling.md, "Carrying
surplus groups"), the keep/carry/drop decision (`decide_round`) and the reward over all groups.
"""

import math
from dataclasses import dataclass

import torch

# A round asks for this many more groups than the pass rate predicts, so that one refill usually suffices.
REFILL_MARGIN = 1.2
# No round generates more than this many times the batch's number of groups, whatever the pass rate.
MAX_ROUND_SIZE_FACTOR = 4


def informative_group_mask(scores: torch.Tensor, tolerance: float) -> torch.Tensor:
    """True for each group (row of `scores`, shape `(num_groups, num_generations)`) whose scores differ.

    A group is degenerate when `max - min <= tolerance`; comparing the spread with a tolerance rather than the
    std with exactly 0 keeps float noise (1.0 against 0.99999994) from passing for a real difference. NaN scores
    (a reward that returned `None`) are ignored; a group with fewer than two scored completions is degenerate.
    """
    if scores.dim() != 2:
        raise ValueError(
            f"informative_group_mask: scores must be 2-D (groups, generations), got {tuple(scores.shape)}."
        )
    scored = ~torch.isnan(scores)
    highest = torch.where(scored, scores, torch.full_like(scores, -math.inf)).amax(dim=1)
    lowest = torch.where(scored, scores, torch.full_like(scores, math.inf)).amin(dim=1)
    return (scored.sum(dim=1) >= 2) & ((highest - lowest) > tolerance)


DYNAMIC_SAMPLING_MODES_TEXT = (
    'True or "regenerate" (generate more prompts until the batch is full of informative groups, DAPO as published), '
    '"drop" (one generation batch per step; flat groups take no part in the update) or False'
)


def dynamic_sampling_mode(value) -> str | bool:
    """`DAPOConfig.dynamic_sampling` in its stored form: "regenerate", "drop" or False. `True` means "regenerate";
    the strings "true" and "false" (any case, as a command line gives them) mean `True` and `False`. Anything else
    raises `ValueError` naming the field, the value and what is allowed."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        value = value.lower() == "true"
    if value is True or value == "regenerate":
        return "regenerate"
    if value is False or value == "drop":
        return value
    raise ValueError(f"dynamic_sampling={value!r} is not allowed; expected {DYNAMIC_SAMPLING_MODES_TEXT}.")


# The key of `kept_rows_loss_scale`'s factor in a scored batch (a 0-dim tensor, which TRL's split keeps whole).
KEPT_ROWS_SCALE_KEY = "dynamic_sampling_kept_rows_scale"
# TRL's objectives that average per-row terms over a micro-batch's rows ("dr_grpo": rows x max_completion_length).
ROW_NORMALISED_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "luspo")


def kept_rows_loss_scale(loss_type: str, rows: int, kept_rows: int) -> float:
    """The factor that turns TRL's loss over a generation batch whose flat rows are masked out into that loss
    type's formula over the kept rows alone (dynamic_sampling="drop").

    A masked row adds nothing to any sum. The objectives of `ROW_NORMALISED_LOSS_TYPES` still count it in their
    denominator: "grpo", "sapo" and "luspo" average over a micro-batch's `B` rows and "dr_grpo" divides by
    `B * max_completion_length`, so with `N` rows and `K` kept over the generation batch (every process, every
    micro-batch) the loss over the kept rows is TRL's times `N / K`:

        L = (1 / K) * sum_{kept rows i} l_i        where TRL computes (1 / N) * sum_{kept rows i} l_i

    "dapo", "cispo" and "vespo" divide by `num_items_in_batch`, the generation batch's unmasked tokens, which the
    trainer counts again after masking; "bnpo" divides by each micro-batch's unmasked tokens: factor 1. With no
    kept row the loss is 0 whatever the factor; 0 is returned.
    """
    if not 0 <= kept_rows <= rows:
        raise ValueError(f"kept_rows_loss_scale: kept_rows must be in [0, rows={rows}], got {kept_rows}.")
    if loss_type not in ROW_NORMALISED_LOSS_TYPES:
        return 1.0
    return rows / kept_rows if kept_rows else 0.0


# Consecutive steps without an informative group after which a run is warned, once, that its reward gives no signal.
NO_SIGNAL_STEPS = 3


def no_signal_warning(steps: int, reward_values: dict[str, list]) -> str:
    """The warning for a run whose last `steps` steps found no informative group, with the distinct values each
    reward function returned in the latest step (`None` for a row it did not score)."""
    seen = "; ".join(
        f"{name}: {sorted({value for value in values if value is not None})[:6]}"
        + (f" and None for {sum(value is None for value in values)} of {len(values)} rows" if None in values else "")
        for name, values in reward_values.items()
    )
    return (
        f"Dynamic sampling found no informative group in {steps} consecutive steps: within every group the rewards "
        f"were equal, so these steps had nothing to train on (zero advantage, loss 0). Rewards "
        f"seen in the latest step: {seen}. Check that the reward functions score the completions (a reward that "
        "returns a constant, or None, for every completion gives nothing to learn), that max_completion_length lets "
        "the model finish an answer, and that the task is neither too easy nor too hard for the model."
    )


def all_correct_groups(scores: torch.Tensor) -> torch.Tensor:
    """True for each group (row of `scores`, shape `(num_groups, num_generations)`) that counts as all correct: the
    package's one outcome rule, behind the `all_correct_frac`/`all_wrong_frac` metrics and prompt skipping's history.

    A group is all correct when the mean of its scored completions is above 0, and all wrong when it is <= 0: the
    sign convention fits both +1/-1 rewards (DAPO) and 1/0 rewards. NaN scores (unscored completions) are ignored; a
    group with none scored is False here, and a caller that tells it apart tests `torch.isnan(scores).all(dim=1)`.
    The mean is taken in `scores`' dtype.
    """
    return torch.nanmean(scores, dim=1) > 0


def degenerate_outcomes(scores: torch.Tensor, informative: torch.Tensor) -> tuple[int, int]:
    """Counts degenerate groups that were all correct and all wrong (`all_correct_groups`); a group with no scored
    completion counts as neither."""
    degenerate_scores = scores[~informative]
    scored = ~torch.isnan(degenerate_scores).all(dim=1)
    correct = all_correct_groups(degenerate_scores)
    return int((correct & scored).sum()), int((~correct & scored).sum())


def groups_to_request(
    missing_groups: int, pass_rate: float | None, batch_groups: int, granularity: int
) -> int:
    """How many new groups to generate for `missing_groups` informative ones at the estimated `pass_rate`.

    `None` (nothing observed yet) asks for exactly what is missing; a rate of 0 asks for the cap. The request is
    `ceil(missing / pass_rate * REFILL_MARGIN)`, rounded up to `granularity` (the number of processes, so every
    process gets the same number of whole groups) and capped at `MAX_ROUND_SIZE_FACTOR * batch_groups`.
    """
    if missing_groups <= 0:
        return 0
    cap = max(granularity, (MAX_ROUND_SIZE_FACTOR * batch_groups) // granularity * granularity)
    if pass_rate is None:
        wanted = missing_groups
    elif pass_rate <= 0:
        wanted = cap
    else:
        wanted = math.ceil(missing_groups / pass_rate * REFILL_MARGIN)
    return min(cap, -(-wanted // granularity) * granularity)


@dataclass
class PassRateTracker:
    """Running estimate of the share of informative groups, used to size the next step's first round, and the
    number of consecutive steps that found none (`steps_without_signal`)."""

    smoothing: float = 0.5
    estimate: float | None = None
    steps_without_signal: int = 0

    def update(self, informative: int, generated: int) -> None:
        if generated <= 0:
            return
        self.steps_without_signal = 0 if informative else self.steps_without_signal + 1
        observed = informative / generated
        if self.estimate is None:
            self.estimate = observed
        else:
            self.estimate = self.smoothing * self.estimate + (1 - self.smoothing) * observed


def first_round_extra_groups(
    batch_groups: int, carried_groups: int, pass_rate: float | None, granularity: int
) -> int:
    """Groups to generate beside the dataloader's own in the first round, from earlier steps' pass rate, when
    `carried_groups` of the `batch_groups` are already filled by carried groups. Sizing the first round from what
    earlier steps observed means most steps fill their batch without a refill.

    Only `batch_groups - carried_groups` fresh informative groups are needed. The dataloader's `batch_groups`
    prompts are generated in any case (skipping them would change which prompts the run sees), so the extra
    groups are what the pass rate asks for beyond them, rounded down to `granularity`. The refill margin stays: what
    it over-generates is carried, not lost.
    """
    if not 0 <= carried_groups <= batch_groups:
        raise ValueError(f"carried_groups must be in [0, {batch_groups}], got {carried_groups}.")
    needed = batch_groups - carried_groups
    if needed == 0 or pass_rate is None or pass_rate >= 1.0:
        return 0
    expected_total = groups_to_request(needed, pass_rate, batch_groups, granularity)
    return max(0, expected_total - batch_groups) // granularity * granularity


def carry_layout_problem(gradient_accumulation_steps: int, steps_per_generation: int, num_iterations: int):
    """`None` where carrying is supported (one of `gradient_accumulation_steps` and `steps_per_generation *
    num_iterations` divides the other; docs/dynamic_sampling.md gives each layout's staleness), else why not."""
    generate_every = steps_per_generation * num_iterations
    if gradient_accumulation_steps % generate_every == 0 or generate_every % gradient_accumulation_steps == 0:
        return None
    return (
        f"neither of gradient_accumulation_steps ({gradient_accumulation_steps}) and steps_per_generation * "
        f"num_iterations ({steps_per_generation} * {num_iterations} = {generate_every}) divides the other, so a "
        "generation batch would begin partway through an optimizer step, where a carried group's staleness varies "
        "from batch to batch and no test covers carrying"
    )


CARRY_VLM_PROBLEM = (
    "vision-language models are not supported: a carried row's generating log-probs are recorded without its images"
)


@dataclass(frozen=True)
class SamplingOptions:
    """The resolved options; `carry_off_reason` says why the default left carrying off (`None` when it did not)."""

    skip_degenerate_prompts: bool
    carry_surplus: bool
    carry_off_reason: str | None = None


def resolve_sampling_options(
    dynamic_sampling: bool | str,
    skip_degenerate_prompts: bool,
    carry_surplus: bool | None,
    gradient_accumulation_steps: int,
    steps_per_generation: int,
    num_iterations: int,
    is_vision_language_model: bool,
) -> SamplingOptions:
    """Resolves carrying's `None` default; raises `ValueError` for an explicit `True` that cannot work. A default
    never refuses a run that the explicit `False` would train: where carrying cannot work it resolves to off and says
    why.

    Without regeneration (`dynamic_sampling` False or "drop") both options are off: there are no rounds to skip
    prompts in and no surplus to carry (an explicit `True` for either is refused by `DAPOConfig`).
    """
    if not dynamic_sampling or dynamic_sampling == "drop":
        return SamplingOptions(skip_degenerate_prompts=False, carry_surplus=False)
    problem = carry_layout_problem(gradient_accumulation_steps, steps_per_generation, num_iterations)
    if problem is None and is_vision_language_model:
        problem = CARRY_VLM_PROBLEM
    if carry_surplus is None:
        return SamplingOptions(skip_degenerate_prompts, carry_surplus=problem is None, carry_off_reason=problem)
    if carry_surplus and problem is not None:
        raise ValueError(f"dynamic_sampling_carry_surplus=True is not allowed: {problem}.")
    return SamplingOptions(skip_degenerate_prompts, carry_surplus=carry_surplus)


# Logged beside TRL's `reward`; docs/metrics.md says which of the two to read.
ALL_GROUPS_REWARD_METRIC = "dynamic_sampling/reward_all_groups"


def total_reward_sum(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> tuple[float, int]:
    """Sum over completions of the weighted sum of their rewards, and the number of completions: their quotient is
    `GRPOTrainer`'s `reward` (a reward function's `None`, NaN, counts as 0 in a completion's sum)."""
    totals = (rewards_per_func * reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    return totals.sum().item(), totals.numel()


@dataclass
class RoundDecision:
    """What a step does with its generated groups, as positions in generation order. `short`: fewer groups than
    needed could be trained (the caller raises or trains on, as `dynamic_sampling_on_exhausted` says)."""

    kept: list[int]
    filled: list[int]
    carried: list[int]
    dropped: list[int]
    short: bool

    @property
    def trained(self) -> list[int]:
        return self.kept + self.filled


def decide_round(informative: list[bool], needed: int, fill: bool, carry_capacity: int) -> RoundDecision:
    """The keep/carry/drop decision over a step's generated groups, from their informative flags in generation order.

    Trained: the first `needed` informative groups, then with `fill` the earliest degenerate ones when too few are
    informative. Carried: the earliest informative groups beyond those, up to `carry_capacity` (0: carrying off;
    with carrying, the next batch's number of groups, since a carried group is trained in the very next batch or not
    at all). Dropped: the informative groups left over.

    Without `GRPOTrainer`: an asynchronous trainer that scores groups as they arrive calls this with the flags it
    holds so far; while `short`, it asks for `groups_to_request(needed - informative, pass_rate, ...)` more prompts;
    once it is not, it trains `trained` (carried groups of the previous call first) and keeps `carried` for the
    next batch. Every process that calls it with the same flags gets the same answer, with no collective.
    """
    if needed < 0 or carry_capacity < 0:
        raise ValueError(f"decide_round: needed and carry_capacity must be >= 0, got {needed} and {carry_capacity}.")
    informative_groups = [i for i, flag in enumerate(informative) if flag]
    degenerate_groups = [i for i, flag in enumerate(informative) if not flag]
    kept, surplus = informative_groups[:needed], informative_groups[needed:]
    # Degenerate groups carry no signal on the sampling metric but keep the batch's shape.
    filled = degenerate_groups[: needed - len(kept)] if fill else []
    return RoundDecision(
        kept=kept, filled=filled, carried=surplus[:carry_capacity], dropped=surplus[carry_capacity:],
        short=len(kept) + len(filled) < needed,
    )  # fmt: skip
