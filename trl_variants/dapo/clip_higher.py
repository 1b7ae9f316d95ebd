"""When clip-higher cannot act, and what makes it act (docs/algorithms.md, "1. Clip-higher").

The ratio pi_theta / pi_old differs from 1 only once the policy has been updated since the row was generated. When
`gradient_accumulation_steps` is a multiple of `steps_per_generation * num_iterations` (TRL's default layout), each
generation batch is trained within one optimizer step, every ratio is 1 (with vLLM's importance-sampling correction
too, up to rounding) and the upper clip never binds; carried surplus groups, one optimizer update old, are the
exception. `steps_per_generation` a multiple (>= 2) of `gradient_accumulation_steps`, or `num_iterations > 1`,
makes it act.
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
