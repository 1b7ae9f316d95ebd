"""Fixtures of the vLLM tests: one real vLLM colocate engine for the whole session, and the policy it serves.

The tests run only where vLLM is installed (`scripts/install_vllm_cpu.sh` installs its CPU build); elsewhere they
are skipped. On a machine without a GPU, vLLM runs on its CPU backend.
"""

from .cpu_backend import use_cpu_backend_defaults

use_cpu_backend_defaults()  # before vLLM is imported or any engine starts

from trl_variants.vllm_cpu import keep_linear_weights_reloadable  # noqa: E402

# The package's trainers do this themselves; the tests' GRPOTrainer baselines share the session's engine.
keep_linear_weights_reloadable()

import pytest  # noqa: E402
from trl.import_utils import is_vllm_available  # noqa: E402

from trl_variants.toy import make_toy_task  # noqa: E402

VLLM_MISSING = (
    "vLLM is not installed (or not a version TRL 1.16 supports); the vLLM tests need it: on a CPU machine run "
    "`bash scripts/install_vllm_cpu.sh` and use the environment it builds."
)


def pytest_collection_modifyitems(config, items):
    if is_vllm_available():
        return
    skip = pytest.mark.skip(reason=VLLM_MISSING)
    for item in items:
        # The marker, not `item.keywords`: keywords also hold parameter ids, such as the simulated-vLLM case `[vllm]`
        # of tests/dynamic_sampling/test_carry.py, which needs no vLLM and must run everywhere.
        if item.get_closest_marker("vllm"):
            item.add_marker(skip)


class SharedEngine:
    """Stands in for `vllm.LLM` inside TRL: the first trainer starts a real engine, later trainers get the same
    one. An engine start costs 15-30 s on a CPU, a short training run a few seconds. Reuse is sound because every
    trainer syncs its own weights into the engine before its first generation (TRL's `_last_loaded_step` starts
    at -1), and every trainer here serves the same policy folder with the same engine settings."""

    # The per-trainer batch cap; vLLM schedules a larger request in several batches, with the same results.
    SCHEDULING_ONLY = {"max_num_seqs"}

    def __init__(self, engine_class):
        self.engine_class = engine_class
        self.engine = None
        self.settings = None

    def __call__(self, **kwargs):
        settings = {key: value for key, value in kwargs.items() if key not in self.SCHEDULING_ONLY}
        if self.engine is None:
            self.engine = self.engine_class(**kwargs)
            self.settings = settings
        elif settings != self.settings:
            held = self.settings
            changed = {key: (held.get(key), value) for key, value in settings.items() if value != held.get(key)}
            raise AssertionError(f"a trainer asked for vLLM engine settings other than the shared engine's: {changed}")
        return self.engine


@pytest.fixture(scope="session")
def shared_engine():
    if not is_vllm_available():
        pytest.skip(VLLM_MISSING)
    from trl.generation import vllm_generation

    engine = SharedEngine(vllm_generation.LLM)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vllm_generation, "LLM", engine)
        yield engine


@pytest.fixture(scope="session")
def vllm_policy(tmp_path_factory):
    """The toy task with 32-wide attention heads (vLLM's CPU backend accepts no smaller), its policy saved as a
    local model folder: vLLM loads a model by its path."""
    task = make_toy_task(seed=0, num_attention_heads=2)
    folder = tmp_path_factory.mktemp("vllm_policy")
    task.model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    return task, folder
