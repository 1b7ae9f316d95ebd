"""Study 3's problems: one held-out set and, per seed, training problems that no other seed and no held-out problem
shares, reorderings included.

Study 2 drew each seed's training problems with reasoning-gym seed `s`; reasoning-gym draws entry i of seed s with
`Random(s + i)`, so seed s's problems were seed 0's problems s, s + 1, ...: the 8 seeds shared 17 problems. Here all
problems come from ONE reasoning-gym draw, deduplicated by canonical form (`task.canonical_form`, so `a + b` and
`b + a` are one problem) in draw order: the first `held_out` forms are held out, the next `per_seed` belong to seed
0, the next to seed 1, and so on. Disjointness is by construction, and `check_disjoint` verifies it on the result.
"""

from collections.abc import Sequence

from benchmarks.real_model_study.task import select_distinct


def disjoint_split(forms: Sequence, held_out: int, per_seed: int, seeds: int, exclude=()) -> tuple[list[int], list[list[int]]]:
    """Positions in `forms` (canonical forms in draw order) of the held-out problems and of each seed's training
    problems: consecutive blocks of first occurrences of distinct forms, none in `exclude`."""
    if min(held_out, per_seed, seeds) < 1:
        raise ValueError(f"disjoint_split: held_out={held_out}, per_seed={per_seed}, seeds={seeds}; each must be >= 1.")
    needed = held_out + per_seed * seeds
    positions = select_distinct(forms, needed, exclude=exclude)
    if len(positions) < needed:
        raise ValueError(f"disjoint_split: the draw holds {len(positions)} distinct problems outside `exclude`; "
                         f"{held_out} held out + {seeds} seeds x {per_seed} need {needed}. Draw more.")
    training = positions[held_out:]
    return positions[:held_out], [training[seed * per_seed:(seed + 1) * per_seed] for seed in range(seeds)]


def check_disjoint(forms: Sequence, held_out: list[int], per_seed: list[list[int]]) -> None:
    """Raises `ValueError` naming the first overlap: a form held out and trained on, or trained on by two seeds, or
    twice within one seed."""
    owner = {forms[position]: "the held-out set" for position in held_out}
    for seed, positions in enumerate(per_seed):
        for position in positions:
            form = forms[position]
            if form in owner:
                raise ValueError(f"check_disjoint: seed {seed}'s problem {form} is also in {owner[form]}.")
            owner[form] = f"seed {seed}'s training problems"


def study_problems(settings, seeds: int, draw_seed: int, draw_size: int) -> dict:
    """The held-out set and `seeds` training blocks (plus nothing else) of study 3's task, from one reasoning-gym
    draw: questions, canonical forms and the draw's indices of each, the worked example's form excluded."""
    from trl_variants.real.run import task_example
    from trl_variants.rewards.reasoning_gym_source import make_procedural_dataset

    from benchmarks.real_model_study.task import CANDIDATES, canonical_form

    from .design import TASK_NAME

    task, config = CANDIDATES[TASK_NAME]
    draw = make_procedural_dataset(task, config, size=draw_size, seed=draw_seed)
    entries = [draw[index] for index in range(len(draw))]
    forms = [canonical_form(entry["metadata"]["expression"]) for entry in entries]
    example = canonical_form(task_example(task, config)["metadata"]["expression"])
    held_out, per_seed = disjoint_split(forms, settings.held_out_prompts, settings.train_size, seeds, exclude={example})
    check_disjoint(forms, held_out, per_seed)

    def block(positions):
        return {"indices": positions, "questions": [entries[i]["question"] for i in positions],
                "forms": [forms[i] for i in positions]}

    return {"held_out": block(held_out), "train": [block(positions) for positions in per_seed]}
