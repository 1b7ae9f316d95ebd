"""When clip-higher cannot act, and what makes it act.

Clip-higher (`epsilon_high > epsilon`) bounds the policy ratio pi_theta / pi_old of a row with a positive advantage
at 1 + epsilon_high instead of 1 + epsilon. The ratio differs from 1 only once the policy has been updated since the
row was generated. TRL 1.16 generates a batch every `steps_per_generation * num_iterations` micro-steps
(`GRPOTrainer._prepare_inputs`); when `gradient_accumulation_steps` is a multiple of that, the whole generation batch
is trained inside one optimizer step, before any update, so every ratio is exactly 1 (TRL then takes the old
log-probs from the loss's own forward, detached) and the upper clip never binds. That is TRL's default layout
(`steps_per_generation` = `gradient_accumulation_steps`, `num_iterations=1`). With vLLM's importance-sampling
correction TRL computes old log-probs separately, but from the same, not yet updated, weights, so the ratio is
still 1 up to rounding. The DAPO paper trains each rollout batch in 16 updates; here that means
`steps_per_generation` a multiple (>= 2) of `gradient_accumulation_steps`, or `num_iterations > 1`.

Carried surplus groups (`dynamic_sampling_carry_surplus`) are the exception: they are one optimizer update old, so
their ratio can reach the clip. Carrying also works in the layouts where clip-higher acts on every row (there a
carried group is a generation batch older than a fresh one; `trl_variants.dynamic_sampling.carry`).
"""

# Objectives whose ratio is clipped at 1 + epsilon_high (TRL 1.16's two-sided clipping). For "cispo" epsilon_high
# is a cap on the weight itself, "sapo" and "vespo" do not clip with it.
UPPER_CLIPPED_LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo", "luspo")


def clip_higher_idle_reason(
    epsilon: float,
    epsilon_high: float | None,
    loss_type: str,
    gradient_accumulation_steps: int,
    steps_per_generation: int,
    num_iterations: int,
    carry_surplus: bool,
) -> str | None:
    """The info line saying why clip-higher cannot act on freshly generated rows and how to make it act, or `None`
    when it can act or is not asked for (`epsilon_high` unset or equal to `epsilon`, or an objective that does not
    clip at 1 + epsilon_high)."""
    if epsilon_high is None or epsilon_high <= epsilon or loss_type not in UPPER_CLIPPED_LOSS_TYPES:
        return None
    generate_every = steps_per_generation * num_iterations
    if gradient_accumulation_steps % generate_every != 0:
        return None
    carried = (
        " It can act only on carried surplus groups, which are one optimizer update old (carrying works in the "
        "layouts named next too)."
        if carry_surplus
        else ""
    )
    return (
        f"Clip-higher (epsilon_high={epsilon_high} > epsilon={epsilon}) cannot act on freshly generated rows: "
        f"gradient_accumulation_steps ({gradient_accumulation_steps}) is a multiple of steps_per_generation * "
        f"num_iterations ({steps_per_generation} * {num_iterations}), so each generation batch is trained within one "
        f"optimizer step, every policy ratio is 1 and the upper clip never binds.{carried} To make it act, as the DAPO "
        "paper's several updates per rollout batch do, set steps_per_generation to a multiple (>= 2) of "
        f"gradient_accumulation_steps (e.g. steps_per_generation={2 * gradient_accumulation_steps}), or "
        "num_iterations > 1."
    )
