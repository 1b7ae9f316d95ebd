"""DAPO's dynamic sampling: `selection` holds the pure maths (which groups are informative, how many prompts to
generate next, which groups to keep), `trainer` the mixin that runs generation rounds inside `GRPOTrainer`."""
