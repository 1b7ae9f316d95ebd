"""Study 3's problem split: every seed's training problems are its own, disjoint from every other seed's and from
the held-out set, reorderings included, and there are enough of them."""

import pytest

from benchmarks.real_model_study3.split import check_disjoint, disjoint_split


def test_blocks_follow_the_first_occurrence_of_each_form_and_skip_repeats_and_exclusions():
    forms = ["a", "b", "a", "x", "c", "d", "b", "e", "f", "g"]
    held_out, seeds = disjoint_split(forms, held_out=2, per_seed=2, seeds=2, exclude={"x"})
    assert held_out == [0, 1]  # a, b
    assert seeds == [[4, 5], [7, 8]]  # c, d | e, f: the repeated a and b and the excluded x are skipped
    check_disjoint(forms, held_out, seeds)


def test_a_draw_too_small_is_refused_with_what_it_holds_and_what_is_needed():
    with pytest.raises(ValueError, match="holds 3 distinct problems .* need 5"):
        disjoint_split(["a", "b", "c", "a"], held_out=1, per_seed=2, seeds=2)
    with pytest.raises(ValueError, match="per_seed=0"):
        disjoint_split(["a"], held_out=1, per_seed=0, seeds=1)


def test_check_disjoint_names_study_2s_overlap():
    # Study 2: seed s trained on seed 0's problems s, s + 1, ...: neighbouring seeds share all but one.
    forms = list("abcdefgh")
    with pytest.raises(ValueError, match="seed 1's problem b is also in seed 0's training problems"):
        check_disjoint(forms, held_out=[7], per_seed=[[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="seed 0's problem h is also in the held-out set"):
        check_disjoint(forms, held_out=[7], per_seed=[[7]])


def test_the_studys_own_draw_gives_every_seed_its_own_problems():
    """The real reasoning-gym draw the method fixes: no problem, nor a reordering of one, in two seeds' training
    sets or in a training set and the held-out set; at least 100 problems per seed."""
    from benchmarks.real_model_study.task import canonical_form
    from benchmarks.real_model_study3.design import DRAW_SEED, DRAW_SIZE, PILOT_SEED, SEEDS, Settings
    from benchmarks.real_model_study3.split import study_problems

    settings = Settings()
    problems = study_problems(settings, PILOT_SEED + 1, DRAW_SEED, DRAW_SIZE)
    assert len(problems["train"]) == len(SEEDS) + 1  # the study's seeds and the pilot's block
    assert settings.train_size >= 100 and len(problems["held_out"]["questions"]) == settings.held_out_prompts >= 300

    def forms_of(questions):  # recomputed from the question text, independently of the split's bookkeeping
        return {canonical_form(question.removeprefix("Calculate ").removesuffix(".")) for question in questions}

    seen = forms_of(problems["held_out"]["questions"])
    assert len(seen) == settings.held_out_prompts
    for block in problems["train"]:
        own = forms_of(block["questions"])
        assert len(own) == len(block["questions"]) == settings.train_size
        assert not own & seen
        seen |= own
