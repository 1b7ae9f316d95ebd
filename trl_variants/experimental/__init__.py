"""Opt-in features that no study supports yet. Each is off by default and keeps its config fields; see
docs/dynamic_sampling.md for what the evidence says about each."""
