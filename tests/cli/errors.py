"""What every CLI mistake must look like on stderr."""

ERROR_PREFIX = "trl-variants: error:"


def one_error_line(stderr: str) -> str:
    """The single error line `stderr` must end with; no traceback and no other error line before it."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr[-3000:]
    return errors[0]
