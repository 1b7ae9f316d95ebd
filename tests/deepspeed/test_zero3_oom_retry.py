"""A generate call that runs out of memory under DeepSpeed ZeRO-3 on one process is halved and retried with
training left as it was: TRL's generation context removes ZeRO-3's module hooks and turns gradient checkpointing
off around each call, and an error inside the call must not leave them so (generate_calls.py). The run that meets
the error (raised before the call draws anything) trains to the end and logs exactly what the run with the halved
size set from the start logs (tests/deepspeed/scripts/zero3_oom_retry.py). A retry's own pass through TRL's context
adds the hooks back on its way out, so it is an error no retry takes, caught by the caller, that shows whether the
hooks were restored."""

import json

from .launch import SCRIPTS, deepspeed_test, run_zero

pytestmark = deepspeed_test

LAUNCH_TIMEOUT_S = 300


def test_a_retry_under_zero3_keeps_hooks_and_checkpointing_and_logs_what_the_capped_run_logs(tmp_path):
    run_zero(3, SCRIPTS / "zero3_oom_retry.py", tmp_path, LAUNCH_TIMEOUT_S, num_processes=1)
    hit, capped = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("hit", "capped"))
    assert hit["engine"] == "DeepSpeedEngine" and hit["zero_stage"] == 3
    assert hit["failed"] == [8] and capped["failed"] == []
    assert hit["global_step"] == capped["global_step"] == 3
    # Every loss computation, those after the error included, runs with checkpointing on and ZeRO-3's hooks in place.
    assert len(hit["losses"]) == 3
    assert all(loss["checkpointing"] for loss in hit["losses"])
    assert [loss["forward_hooks"] for loss in hit["losses"]] == [loss["forward_hooks"] for loss in capped["losses"]]
    assert all(loss["forward_hooks"] > 0 for loss in hit["losses"])
    assert hit["logs"] == capped["logs"]
    # An error no retry can take (a call of one group) reaches the caller with training as it was before the call.
    raised = hit["after_raised"]
    assert "the smallest call there is" in raised["message"]
    assert raised["checkpointing"] and raised["forward_hooks"] == hit["losses"][-1]["forward_hooks"]
