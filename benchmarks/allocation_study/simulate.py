"""Informative groups per generated completion, allocation against G completions per prompt, on synthetic prompts
whose true pass rates are fixed: no model, seconds on a CPU. It plans the allocation study (method.md) and is the
simulation `tests/experimental/test_allocation.py` bounds.

    python -m benchmarks.allocation_study.simulate [--seeds 20] [--smoke]

Drawing G completions for each prompt, as `GRPOTrainer` does, yields on average `mean(1 - p**G - (1 - p)**G) / G`
informative groups per completion, exactly. The allocation (`trl_variants.experimental.allocation`) is run step by
step: each step has a pool of `pool * P` candidate prompts (the next ones of a seeded permutation of the data set),
their posterior from earlier steps (`PassRatePosterior`, nothing forgotten: the rates do not move), and rounds of
`allocate_round` with a budget of P * G completions less what finished groups cover, until P prompts are mixed with
at least G completions or `max_rounds`. Counted: informative groups (at most P a step: a surplus would be dropped,
not carried) per completion generated. `remember=False` never updates the posterior: every prompt is scored from
the prior, which isolates what the within-step decisions alone bring.

Table 1: three spreads of pass rates over 256 prompts, 100 steps of P = 4. Table 2: the study's shape, P = 8 groups
of 8 a generation batch and pass rates from Beta(0.3, 0.7) (mean 0.3, most prompts near 0 or 1), until 216 or 432
completions (about 4,000 and 8,000 tokens at study 3's 18.5 tokens a completion), for training sets of 16-120
problems: how the gain depends on how often a problem comes back.
"""

import argparse

import numpy as np

from benchmarks.shared.output import command_line
from trl_variants.experimental.allocation import allocate_round, finished_prompts
from trl_variants.experimental.prompt_skipping.posterior import (
    PassRatePosterior,
    informative_probability,
)

G = 8
SPREADS = {  # a data set's true pass rates, drawn with `rng`
    "U-shaped, Beta(0.3, 0.3), 256 prompts": lambda rng: rng.beta(0.3, 0.3, 256),
    "uniform on [0, 1], 256 prompts": lambda rng: rng.uniform(0, 1, 256),
    "100 never right, 60 always right, 96 uniform": lambda rng: np.concatenate([np.zeros(100), np.ones(60),
                                                                                rng.uniform(0, 1, 96)]),
}


def g_per_prompt_informative_per_completion(pass_rates) -> float:
    return float(informative_probability(np.asarray(pass_rates), G).mean() / G)


def allocation_informative_per_completion(pass_rates, prompts: int, rng, steps: int | None = None,
                                          completions: int | None = None, pool: int = 4, chunk: int = 2,
                                          max_rounds: int = 8, remember: bool = True) -> float:
    """Informative groups per completion over `steps` steps, or over the steps until `completions` are generated."""
    posterior = PassRatePosterior(len(pass_rates), decay_right=1.0, decay_wrong=1.0)
    order = rng.permutation(len(pass_rates))
    candidates = min(pool * prompts, len(pass_rates))
    informative = generated = step = 0
    while (step < steps) if steps is not None else (generated < completions):
        rows = order[(step * candidates + np.arange(candidates)) % len(pass_rates)]
        alpha, beta = posterior.parameters(rows, step)
        right, wrong = np.zeros(candidates, dtype=np.int64), np.zeros(candidates, dtype=np.int64)
        for _ in range(max_rounds):
            finished = int(finished_prompts(right, wrong, G).sum())
            granted = allocate_round(alpha, beta, right, wrong, max(prompts - finished, 0) * G, G, chunk, 4 * G)
            if finished >= prompts or granted.sum() == 0:
                break
            hits = rng.binomial(granted, pass_rates[rows])
            right, wrong, generated = right + hits, wrong + granted - hits, generated + int(granted.sum())
        informative += min(int(finished_prompts(right, wrong, G).sum()), prompts)
        seen = right + wrong > 0
        if remember:
            posterior.record(rows[seen], right[seen], (right + wrong)[seen], step)
        step += 1
    return informative / generated


def ratio_text(ratios) -> str:
    return f"{np.mean(ratios):.2f} ({np.min(ratios):.2f}-{np.max(ratios):.2f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="data sets drawn per setting (seed 100 + s)")
    parser.add_argument("--smoke", action="store_true", help="2 seeds, short runs: only checks the script works")
    cli = parser.parse_args(argv)
    seeds, steps = (2, 10) if cli.smoke else (cli.seeds, 100)
    command = command_line("benchmarks.allocation_study.simulate", argv)
    print(f"Printed by `{command}`; ratio: allocation / G per prompt, mean (min-max) over {seeds} seeds.\n")
    print("| pass rates | with the posterior's memory | scored from the prior only |\n| --- | --- | --- |")
    for name, draw in SPREADS.items():
        cells = []
        for remember in (True, False):
            ratios = [allocation_informative_per_completion(pass_rates, 4, np.random.default_rng(seed), steps=steps,
                                                            remember=remember)
                      / g_per_prompt_informative_per_completion(pass_rates)
                      for seed in range(seeds) for pass_rates in [draw(np.random.default_rng(100 + seed))]]
            cells.append(ratio_text(ratios))
        print(f"| {name} | {' | '.join(cells)} |")
    budgets = (216, 432) if not cli.smoke else (32,)
    print("\n| training problems | " + " | ".join(f"{b} completions" for b in budgets) + " |\n|"
          + " --- |" * (len(budgets) + 1))
    for problems in (16, 32, 64, 120):
        cells = []
        for budget in budgets:
            ratios = []
            for seed in range(seeds):
                pass_rates = np.random.default_rng(100 + seed).beta(0.3, 0.7, problems)
                found = allocation_informative_per_completion(pass_rates, 8, np.random.default_rng(seed),
                                                              completions=budget)
                ratios.append(found / g_per_prompt_informative_per_completion(pass_rates))
            cells.append(ratio_text(ratios))
        print(f"| {problems} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
