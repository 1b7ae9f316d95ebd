"""A study's problems: one held-out set and, per seed, training problems that no other seed and no held-out problem
shares, from ONE reasoning-gym draw deduplicated by a key (for arithmetic, `canonical_form`, so that `a + b` and
`b + a` are one problem): the first `held_out` distinct keys are held out, the next `per_seed` belong to seed 0,
the next to seed 1, and so on. Disjointness is by construction, and `check_disjoint` verifies the result.

reasoning-gym's `basic_arithmetic` without parentheses evaluates left to right (`4 + 0 * 0` has the gold answer 0),
so `canonical_form` refuses an expression mixing `*` with `+`/`-`: reordering it is not the same problem.
"""

import re
from collections.abc import Iterable, Sequence

_TOKEN = re.compile(r"\d+|[+\-*/]")
_EXPRESSION = re.compile(r"\s*\d+(\s*[+\-*/]\s*\d+)*\s*")


def canonical_form(expression: str) -> tuple:
    """The problem `expression` poses, independent of the order of its terms: with `+`/`-` the sorted signed terms
    (a zero's sign dropped), with `*` alone the sorted factors; any other mix raises `ValueError`."""
    if not _EXPRESSION.fullmatch(expression):
        raise ValueError(f"canonical_form: {expression!r} is not numbers joined by + - * /.")
    tokens = _TOKEN.findall(expression)
    operators, numbers = set(tokens[1::2]), [int(token) for token in tokens[::2]]
    if operators <= {"*"}:
        return ("*", *sorted(numbers))
    if not operators <= {"+", "-"}:
        raise ValueError(f"canonical_form: {expression!r} mixes {sorted(operators)}; only + and - together, or * "
                         "alone, have an order-free form.")
    signs = [1] + [1 if operator == "+" else -1 for operator in tokens[1::2]]
    return tuple(sorted((sign if number else 1, number) for sign, number in zip(signs, numbers, strict=True)))


def arithmetic_key(entry: dict) -> tuple:
    """The dedup key of a `basic_arithmetic` entry: its expression's canonical form."""
    return canonical_form(entry["metadata"]["expression"])


def question_key(entry: dict) -> str:
    return entry["question"]


def select_distinct(keys: Iterable, limit: int, exclude: Iterable = ()) -> list[int]:
    """Positions of the first entry of each of the first `limit` distinct `keys`, skipping keys in `exclude`."""
    if limit < 0:
        raise ValueError(f"select_distinct: limit={limit}; expected an integer >= 0.")
    seen, positions = set(exclude), []
    for position, key in enumerate(keys):
        if len(positions) == limit:
            break
        if key not in seen:
            seen.add(key)
            positions.append(position)
    return positions


def disjoint_split(keys: Sequence, held_out: int, per_seed: int, seeds: int, exclude=()) -> tuple[list[int], list[list[int]]]:
    """Positions in `keys` (draw order) of the held-out problems and of each seed's training problems."""
    if min(held_out, per_seed, seeds) < 1:
        raise ValueError(f"disjoint_split: held_out={held_out}, per_seed={per_seed}, seeds={seeds}; each must be >= 1.")
    needed = held_out + per_seed * seeds
    positions = select_distinct(keys, needed, exclude=exclude)
    if len(positions) < needed:
        raise ValueError(f"disjoint_split: the draw holds {len(positions)} distinct problems outside `exclude`; "
                         f"{held_out} held out + {seeds} seeds x {per_seed} need {needed}. Draw more.")
    training = positions[held_out:]
    return positions[:held_out], [training[seed * per_seed:(seed + 1) * per_seed] for seed in range(seeds)]


def check_disjoint(keys: Sequence, held_out: list[int], per_seed: list[list[int]]) -> None:
    """Raises `ValueError` naming the first key held out and trained on, or trained on by two seeds or twice."""
    owner = {keys[position]: "the held-out set" for position in held_out}
    for seed, positions in enumerate(per_seed):
        for position in positions:
            if keys[position] in owner:
                raise ValueError(f"check_disjoint: seed {seed}'s problem {keys[position]} is also in "
                                 f"{owner[keys[position]]}.")
            owner[keys[position]] = f"seed {seed}'s training problems"


def study_problems(study, settings, blocks: int) -> dict:
    """The held-out set and `blocks` training blocks of `study`'s task from its one draw, the worked example's key
    excluded: per block the draw's indices, questions and keys."""
    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import make_procedural_dataset

    task, config = study.task
    draw = make_procedural_dataset(task, config, size=study.draw_size, seed=study.draw_seed)
    entries = [draw[index] for index in range(len(draw))]
    keys = [study.problem_key(entry) for entry in entries]
    example = study.problem_key(task_example(task, config))
    held_out, per_seed = disjoint_split(keys, settings.held_out_prompts, settings.train_size, blocks, exclude={example})
    check_disjoint(keys, held_out, per_seed)

    def block(positions):
        return {"indices": positions, "questions": [entries[i]["question"] for i in positions],
                "keys": [keys[i] for i in positions]}

    return {"held_out": block(held_out), "train": [block(positions) for positions in per_seed]}
