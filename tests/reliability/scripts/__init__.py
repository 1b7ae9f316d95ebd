"""Scripts the reliability tests run in subprocesses (torchrun, signals)."""
