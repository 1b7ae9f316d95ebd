"""The `trl-variants` command: `main` dispatches, `args` parses, `train` runs a training command, `launch`
relaunches under accelerate, `output` guards the output folder, `demo` and `demo_artifacts` make the offline demo."""

from .main import main

__all__ = ["main"]
