"""One logged training step as a JSON record: shared by the demo's and the real-model example's training logs, so
that neither command's module has to import the other's."""

import math


def json_scalar(value):
    """JSON-safe scalars: tensors and numpy numbers become floats, NaN becomes null."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def step_record(step: int, logs: dict) -> dict:
    """`{"step": step, **logs}` with every logged value made JSON-safe (`json_scalar`)."""
    return {"step": step, **{key: json_scalar(value) for key, value in logs.items()}}
