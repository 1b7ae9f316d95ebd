"""When a study reads an arm at a token budget, and what it reads there: pure functions, no model.

An arm is read on both sides of each budget of generated completion tokens, and its score at the budget is
interpolated linearly in tokens between the two readings, so that every arm is compared at exactly the budget
(study 3 read each arm only at the last generation-batch boundary below a budget, so an arm that generates more per
batch was read at fewer tokens).

Both readings are taken on the weights of a generation-batch boundary, while the next batch is being generated
(generation never changes the weights): the reading *below* when the tokens generated so far first pass the budget
(the boundary's count is at or below it), the reading *above* at the next boundary (its count is above the
budget). A reading below that lands exactly on the budget needs no reading above.
"""

EVAL_SEED_BASE = 10_000


def check_budgets(budgets) -> tuple[int, ...]:
    """`budgets` as a tuple, or `ValueError` unless they are strictly increasing positive integers."""
    budgets = tuple(budgets)
    if not budgets or any(not isinstance(b, int) or b <= 0 for b in budgets) or list(budgets) != sorted(set(budgets)):
        raise ValueError(f"token budgets {budgets!r}: expected strictly increasing positive integers.")
    return budgets


def readings_due(budgets, read: dict, tokens_at_boundary: int, tokens_generated: int) -> list[tuple[int, str]]:
    """The (budget, side) readings to take now, on the weights of the boundary at `tokens_at_boundary` tokens while
    `tokens_generated` (the current batch's rounds included) have been generated. `read` maps budget -> {side: tokens}
    of the readings already taken. Raises `ValueError` when a budget was passed in an earlier batch and never read below: its
    boundary's weights are gone."""
    budgets = check_budgets(budgets)
    if not 0 <= tokens_at_boundary <= tokens_generated:
        raise ValueError(f"readings_due: tokens_at_boundary={tokens_at_boundary}, tokens_generated={tokens_generated}; "
                         "expected 0 <= tokens_at_boundary <= tokens_generated.")
    due = []
    for budget in budgets:
        sides = read.get(budget, {})
        if "below" not in sides and tokens_generated > budget:
            if tokens_at_boundary > budget:
                raise ValueError(f"readings_due: budget {budget} was passed before the boundary at "
                                 f"{tokens_at_boundary} tokens and never read below; check after every round.")
            due.append((budget, "below"))
        elif ("below" in sides and "above" not in sides and needs_above(budget, sides["below"])
              and tokens_at_boundary > budget):
            due.append((budget, "above"))
    return due


def needs_above(budget: int, below_tokens: int) -> bool:
    return below_tokens < budget


def budgets_read(budgets, readings: list[dict]) -> bool:
    """Whether `readings` (evaluation points with `budget`, `side`, `tokens`) hold every budget on both sides, or
    below exactly at the budget."""
    for budget in check_budgets(budgets):
        sides = {point["side"]: point for point in readings if point.get("budget") == budget}
        if "below" not in sides or (needs_above(budget, sides["below"]["tokens"]) and "above" not in sides):
            return False
    return True


def interpolate(budget: int, below: tuple[float, float], above: tuple[float, float] | None) -> float:
    """The score at `budget` tokens, linear in tokens between the readings `below` and `above`, each a
    (tokens, score) pair with below's tokens <= budget < above's (`above` None when below is exactly at it)."""
    below_tokens, below_score = below
    if below_tokens == budget:
        return below_score
    if above is None or not below_tokens < budget < above[0]:
        raise ValueError(f"interpolate: budget {budget} with readings at {below_tokens} and "
                         f"{None if above is None else above[0]} tokens; expected below <= budget < above.")
    above_tokens, above_score = above
    return below_score + (above_score - below_score) * (budget - below_tokens) / (above_tokens - below_tokens)


def measures_sampled(budgets, sampled_budgets, kind: str, budget: int | None = None) -> bool:
    """Whether an evaluation point also measures the sampled pass rate (greedy accuracy is measured at every one):
    step 0 always; with `sampled_budgets` None every point; else only the readings of those budgets."""
    budgets = check_budgets(budgets)
    if sampled_budgets is not None and not set(sampled_budgets) <= set(budgets):
        raise ValueError(f"sampled_budgets={tuple(sampled_budgets)!r}: expected None or some of the token budgets "
                         f"{budgets}.")
    if kind == "step0" or sampled_budgets is None:
        return True
    return kind == "budget" and budget in sampled_budgets


def point_seed(budgets, kind: str, budget_index: int = 0) -> int:
    """The generator seed of an evaluation point's sampled pass rate: step 0, then each budget in order (both of its
    sides), then the fixed step; every arm shares each point's sampling noise."""
    budgets = check_budgets(budgets)
    if kind == "step0":
        return EVAL_SEED_BASE
    if kind == "budget":
        if not 0 <= budget_index < len(budgets):
            raise ValueError(f"point_seed: budget_index={budget_index}; there are {len(budgets)} budgets.")
        return EVAL_SEED_BASE + 1 + budget_index
    if kind == "fixed_step":
        return EVAL_SEED_BASE + 1 + len(budgets)
    raise ValueError(f"point_seed: kind={kind!r}; expected 'step0', 'budget' or 'fixed_step'.")
