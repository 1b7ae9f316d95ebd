"""When study 3 evaluates an arm at equal generated tokens: measured, not interpolated.

Each arm is evaluated on the weights it had at the last generation-batch boundary at or below each token budget.
Generation never changes the weights, so while a generation batch is being generated (in one round or several) the
model still holds the previous boundary's weights: the moment the tokens generated so far pass a budget, the
current model IS that boundary's model, and is evaluated at once, before the batch trains. The evaluation's token
count is the boundary's, never above the budget; the undershoot (at most one generation batch) is recorded, and it
falls on the arm that generates more per batch, against dynamic sampling in comparison (1).
"""


def check_budgets(budgets) -> tuple[int, ...]:
    """`budgets` as a tuple, or `ValueError` unless they are strictly increasing positive integers."""
    budgets = tuple(budgets)
    if not budgets or any(not isinstance(b, int) or b <= 0 for b in budgets) or list(budgets) != sorted(set(budgets)):
        raise ValueError(f"token budgets {budgets!r}: expected strictly increasing positive integers.")
    return budgets


def budgets_due(budgets, evaluated: int, tokens_at_boundary: int, tokens_generated: int) -> list[int]:
    """The budgets to evaluate now: those after the first `evaluated` that `tokens_generated` (every completion token
    generated so far, the current batch's rounds included) has passed, while the weights are still those of the
    boundary at `tokens_at_boundary`. Raises `ValueError` when a due budget lies below the boundary's count: it was
    passed in an earlier batch and not evaluated then, so its weights are gone."""
    budgets = check_budgets(budgets)
    if not 0 <= tokens_at_boundary <= tokens_generated:
        raise ValueError(f"budgets_due: tokens_at_boundary={tokens_at_boundary}, tokens_generated={tokens_generated}; "
                         "expected 0 <= tokens_at_boundary <= tokens_generated.")
    due = [budget for budget in budgets[evaluated:] if tokens_generated > budget]
    missed = [budget for budget in due if budget < tokens_at_boundary]
    if missed:
        raise ValueError(f"budgets_due: budgets {missed} were passed before the boundary at {tokens_at_boundary} tokens "
                         "and never evaluated; check after every generation round.")
    return due


def run_complete(budgets, evaluated: int, step: int, fixed_step: int) -> bool:
    """Whether a run has every evaluation it needs: all token budgets, and the fixed step reached."""
    return evaluated == len(check_budgets(budgets)) and step >= fixed_step
