"""The study's task pieces that need no model: candidate reasoning-gym configurations, a canonical form of an
arithmetic problem (so that `b + a` counts as the same problem as `a + b`), and the selection of held-out and
training questions by canonical form.

reasoning-gym's `basic_arithmetic` without parentheses evaluates its operators left to right (`4 + 0 * 0` has the
gold answer 0), so a configuration may mix `*` with `+`/`-` only at the price of gold answers that contradict
operator precedence; the candidates below use `+` and `-` only, and `canonical_form` refuses a mixed expression.
"""

import re
from collections.abc import Iterable

ARITHMETIC = {"allow_parentheses": False, "allow_negation": False}
# name -> (reasoning-gym task, config). The old benchmark's task (2 terms of one digit) is not re-measured: its
# base pass rate is in the committed result files (0.263 on 40 prompts x 4), and it has 176 canonical forms, too
# few for 300 held-out problems and a training set apart.
CANDIDATES = {
    "3 terms, 1 digit, +-": ("basic_arithmetic", {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1,
                                                  "operators": ["+", "-"], **ARITHMETIC}),
    "4 terms, 1 digit, +-": ("basic_arithmetic", {"min_terms": 4, "max_terms": 4, "min_digits": 1, "max_digits": 1,
                                                  "operators": ["+", "-"], **ARITHMETIC}),
    "2 terms, 2 digits, +": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2,
                                                  "operators": ["+"], **ARITHMETIC}),
    "2 terms, 2 digits, +-": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2,
                                                   "operators": ["+", "-"], **ARITHMETIC}),
    "2 terms, 1-2 digits, +": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                                    "max_digits": 2, "operators": ["+"], **ARITHMETIC}),
    "2 terms, 1-2 digits, +-": ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                                     "max_digits": 2, "operators": ["+", "-"], **ARITHMETIC}),
}  # fmt: skip

_TOKEN = re.compile(r"\d+|[+\-*/]")
_EXPRESSION = re.compile(r"\s*\d+(\s*[+\-*/]\s*\d+)*\s*")


def canonical_form(expression: str) -> tuple:
    """The problem `expression` poses, independent of the order of its terms.

    `+`/`-` only: the sorted multiset of signed terms (`7 - 3 + 2` and `2 + 7 - 3` are both
    `((-1, 3), (1, 2), (1, 7))`; a zero's sign is dropped, since `a + 0` and `a - 0` are one problem). `*` only:
    the sorted factors. Any other mix raises `ValueError`: reasoning-gym evaluates it left to right, so reordering
    it is not the same problem.
    """
    if not _EXPRESSION.fullmatch(expression):
        raise ValueError(f"canonical_form: {expression!r} is not numbers joined by + - * /.")
    tokens = _TOKEN.findall(expression)
    operators, numbers = set(tokens[1::2]), [int(token) for token in tokens[::2]]
    if operators <= {"*"}:
        return ("*", *sorted(numbers))
    if not operators <= {"+", "-"}:
        raise ValueError(
            f"canonical_form: {expression!r} mixes {sorted(operators)}; only + and - together, or * alone, have an "
            "order-free form."
        )
    signs = [1] + [1 if operator == "+" else -1 for operator in tokens[1::2]]
    return tuple(sorted((sign if number else 1, number) for sign, number in zip(signs, numbers, strict=True)))


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


def space_size(config: dict) -> tuple[int, int]:
    """(distinct questions, distinct canonical forms) that `basic_arithmetic` without parentheses can produce with
    `config`: every term count and digit count it allows, operands 0 to 10**digits inclusive (the generator's
    range), enumerated exactly."""
    from itertools import product

    questions, forms = set(), set()
    for terms in range(config["min_terms"], config["max_terms"] + 1):
        for digits in range(config["min_digits"], config["max_digits"] + 1):
            operands = range(10**digits + 1)
            for numbers in product(operands, repeat=terms):
                for operators in product(config["operators"], repeat=terms - 1):
                    parts = [str(numbers[0])]
                    for operator, number in zip(operators, numbers[1:], strict=True):
                        parts += [operator, str(number)]
                    expression = " ".join(parts)
                    questions.add(expression)
                    forms.add(canonical_form(expression))
    return len(questions), len(forms)
