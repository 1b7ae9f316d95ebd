"""The `trl-variants` command: `main` dispatches and reads the demo's options, `args` parses a training command,
`launch` relaunches it under accelerate, `train` checks its sources and trains it, `demo` runs the offline demo."""

from .main import main

__all__ = ["main"]
