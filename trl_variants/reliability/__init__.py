"""Guards that make a run fail clearly or not at all: config checks, dataset checks, the reward guard, complete
checkpoints, and the `ReliabilityMixin` that wires them into a `GRPOTrainer` subclass."""
