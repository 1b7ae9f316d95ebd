"""Carrying surplus informative groups into the next generation batch (`dynamic_sampling_carry_surplus=True`).

Dynamic sampling sizes its rounds with a margin and rounds them up, so a step often finds more informative
groups than its batch holds. Without carrying, that surplus is generated, scored and thrown away. With carrying,
it is trained in the next generation batch, placed before that batch's fresh groups so that it is always used
there and never carried twice: a carried group is at most one generation batch old.

Correctness rests on the old log-probs (docs/dynamic_sampling.md, "Carrying surplus groups", gives the argument):
a carried group's PPO ratio is taken against the policy that generated it, never against the policy that trains it.
In batch k, before any update, `record_generating_logps` runs one no-grad forward over the carried rows only. In
batch k+1, where TRL computes old log-probs itself (several updates per generation batch, or vLLM's
importance-sampling correction), its first log-prob call scores the fresh rows only (`rows_to_score`,
`scoring_rows_only`) and the carried rows get the recorded log-probs before TRL uses them
(`place_generating_logps`), so TRL's own code derives every ratio from them; where TRL computes none (ratio 1), the
loss's own forward fills the fresh rows' and the carried rows get the recorded ones (trl_hooks.carried_rows_in_loss).

Which layouts support carrying, and how stale a carried group then is: `selection.carry_layout_problem`; carried
groups in checkpoints: checkpoint.py.
"""

import torch
from accelerate.utils import gather_object

# Keys of a scored batch with carried rows (TRL splits and shuffles them with the batch): which rows are carried,
# and, where TRL computed no old log-probs, the carried rows' generating log-probs (zero for fresh rows).
CARRIED_ROWS_KEY = "dynamic_sampling_carried_rows"
GENERATING_LOGPS_KEY = "dynamic_sampling_generating_logps"


def trl_computes_old_logps(trainer) -> bool:
    """Mirrors the condition under which TRL's scoring pass computes `old_per_token_logps` itself."""
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    return trainer.args.gradient_accumulation_steps % generate_every != 0 or bool(
        trainer.use_vllm and trainer.vllm_importance_sampling_correction
    )


def record_generating_logps(trainer, rows, filler, policy_logps) -> None:
    """Stores on each carried row (every process holds all of `rows`) its log-probs under the current (generating)
    policy (`policy_logps`: `trl_hooks.policy_logps`). Each process computes an even share of the rows and one
    `gather_object` hands every process all of them.

    Every process runs the same forwards (collectives stay matched under ZeRO-3): each computes the same number of
    rows, padding the last share with copies of `filler` (any row)."""
    if not rows:
        return
    num_processes, process = trainer.accelerator.num_processes, trainer.accelerator.process_index
    share = -(-len(rows) // num_processes)
    mine = rows[process * share : (process + 1) * share]
    padded = mine + [filler] * (share - len(mine))
    logps = policy_logps(trainer, [row.prompt_ids for row in padded], [row.completion_ids for row in padded])
    logps = logps[: len(mine)]
    if num_processes > 1:
        logps = gather_object(logps)
    for row, row_logps in zip(rows, logps, strict=True):
        row.generating_logps = row_logps


def place_generating_logps(old_logps: torch.Tensor, local) -> torch.Tensor:
    """`old_logps` (local rows, padded width) with each carried row's leading tokens replaced by its recorded
    log-probs; the padded tail is masked out of the loss."""
    old_logps = old_logps.clone()
    for i, row in enumerate(local):
        if row.generating_logps is not None:
            length = len(row.generating_logps)
            old_logps[i, :length] = row.generating_logps.to(old_logps.device, old_logps.dtype)
    return old_logps


def rows_to_score(carried: list[bool], carried_per_process: list[int], chunk: int | None) -> list[int]:
    """This process's rows (in order) whose old-policy log-probs TRL's scoring pass must compute, given which of its
    rows are `carried` (generating log-probs recorded) and how many carried rows each process trains.

    Every fresh row, and a carried row only where needed to keep the forward calls equal: TRL's log-prob call runs
    one forward per `chunk` rows (all rows in one when `chunk` is None), and under ZeRO-3 or FSDP every forward is a
    collective, so each process makes as many as the process with the most fresh rows needs. Every process has
    `len(carried)` rows; with one process, or carried rows spread evenly, no carried row is scored."""
    rows = len(carried)
    chunk = chunk or rows
    fresh = [i for i, flag in enumerate(carried) if not flag]
    calls = max(-(-(rows - count) // chunk) for count in carried_per_process)
    fewest_rows = (calls - 1) * chunk + 1 if calls else 0
    padding = [i for i, flag in enumerate(carried) if flag][: max(0, fewest_rows - len(fresh))]
    return sorted(fresh + padding)


# Keyword arguments of TRL's log-prob call holding one entry per row, taken with the rows scored. Any other that is
# set (image inputs, which a carrying run cannot have) makes the call score every row.
ROW_KEYWORDS = ("token_type_ids", "mm_token_type_ids")


def scoring_rows_only(current, rows: list[int], model, input_ids, attention_mask, logits_to_keep, **kwargs):
    """`current`'s log-probs (TRL's log-prob call) computed for `rows` only; the other rows' are zero."""
    if len(rows) == input_ids.shape[0] or any(
        value is not None and value is not False
        for key, value in kwargs.items()
        if key not in ROW_KEYWORDS + ("batch_size",)
    ):
        return current(model, input_ids, attention_mask, logits_to_keep, **kwargs)[0]
    logps = torch.zeros(input_ids.shape[0], logits_to_keep, device=input_ids.device)
    if rows:
        index = torch.tensor(rows, device=input_ids.device)
        taken = {
            key: value[index] if key in ROW_KEYWORDS and value is not None else value for key, value in kwargs.items()
        }
        scored, _, _ = current(model, input_ids[index], attention_mask[index], logits_to_keep, **taken)
        logps = logps.to(scored.dtype).index_copy(0, index, scored)
    return logps


# The policy ratio of carried rows, logged per optimizer step.
CARRIED_RATIO_MEAN = "dynamic_sampling/carried_ratio_mean"
CARRIED_RATIO_MAX = "dynamic_sampling/carried_ratio_max"


def carried_ratio_sums(
    logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, carried: torch.Tensor
) -> torch.Tensor:
    """`[sum, count, max]` of the per-token ratio over the carried rows' masked tokens (`max` is -inf when there are
    none). `logps`, `old_logps`, `mask`: `(B, T)`; `carried`: `(B,)` bool."""
    tokens = mask.bool() & carried.unsqueeze(1)
    ratios = torch.exp(logps.float() - old_logps.float())[tokens]
    largest = ratios.max() if ratios.numel() else torch.tensor(-torch.inf, device=ratios.device)
    return torch.stack([ratios.sum(), torch.tensor(float(ratios.numel()), device=ratios.device), largest])


class CarriedRatioWindow:
    """Sums of the carried rows' ratio over one optimizer step's micro-batches, on this process."""

    def __init__(self) -> None:
        self.sums: torch.Tensor | None = None

    def add(self, logps, old_logps, mask, carried) -> None:
        sums = carried_ratio_sums(logps, old_logps, mask, carried)
        if self.sums is None:
            self.sums = sums
        else:
            self.sums = torch.stack([self.sums[0] + sums[0], self.sums[1] + sums[1], torch.maximum(self.sums[2], sums[2])])

    def close(self, accelerator) -> dict[str, float] | None:
        """The step's metrics over every process, and an empty window; `None` when no micro-batch of the step had
        carried rows. Every process must call it at the same steps: whether a micro-batch holds the carried-rows key
        is the same on every process (`scoring_with_generating_logps`), so `sums` is set on all or none."""
        if self.sums is None:
            return None
        gathered = accelerator.gather(self.sums.unsqueeze(0)).view(-1, 3)
        self.sums = None
        total, count, largest = gathered[:, 0].sum().item(), gathered[:, 1].sum().item(), gathered[:, 2].max().item()
        if count == 0:
            return None
        return {CARRIED_RATIO_MEAN: total / count, CARRIED_RATIO_MAX: largest}
