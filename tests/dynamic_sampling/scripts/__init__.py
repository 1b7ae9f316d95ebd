"""Helpers run by the tests: purpose-made rewards and scripts launched with torchrun."""
