"""Small, fast trainer settings for tests on the toy task, the two-process launcher of the multi-process tests, and
the trainer parameters of tests that run TRL's `GRPOTrainer` beside the package's trainers."""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil  # accelerate's dependency
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
HANG_MESSAGE = "the multi-process run did not finish within"  # then the timeout, in seconds

TEST_DEFAULTS = dict(
    use_cpu=True,
    bf16=False,
    per_device_train_batch_size=16,
    num_generations=4,
    max_completion_length=6,
    learning_rate=1e-3,
    max_steps=2,
    logging_steps=1,
    report_to=[],
    save_strategy="no",
    seed=0,
)
# DAPO exactly as published: dynamic sampling without prompt skipping or carrying (both on by default), for tests
# of dynamic sampling's own behaviour.
DAPO_AS_PUBLISHED = dict(skip_degenerate_prompts=False, dynamic_sampling_carry_surplus=False)


def toy_config(config_class, output_dir, **overrides):
    """A config of `config_class` (GRPOConfig, DAPOConfig or DrGRPOConfig) sized for the toy task."""
    return config_class(str(output_dir), **{**TEST_DEFAULTS, **overrides})


def toy_trainer(trainer_class, config, task, **kwargs):
    return trainer_class(
        task.model,
        kwargs.pop("reward_funcs", task.reward_funcs),
        args=config,
        train_dataset=kwargs.pop("train_dataset", task.train_dataset),
        processing_class=task.tokenizer,
        **kwargs,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_process_command(script, *args) -> list[str]:
    """`torchrun --nproc_per_node 2` on a free local port: two gloo ranks on CPU."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), str(script), *map(str, args),
    ]  # fmt: skip


def run_two_processes(script, out_dir, timeout_s: float) -> str:
    """Runs `script --out out_dir` on two ranks and returns its output; fails the test on a hang or a crash."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "1"}
    return run_launch(two_process_command(script, "--out", out_dir), env, timeout_s)


def run_launch(command: list[str], env: dict[str, str], timeout_s: float) -> str:
    """Runs a multi-process launch (torchrun, accelerate launch) from the repository root and returns its output;
    fails the test on a crash, or on a hang: past `timeout_s` the launcher and all its workers are killed."""
    returncode, output = launch_outcome(command, env, timeout_s)
    assert returncode == 0, output[-4000:]
    return output


def launch_outcome(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """Runs a multi-process launch as `run_launch` does and returns its exit status and output, a crash included;
    fails the test on a hang past `timeout_s`."""
    import pytest

    env = {**env, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    # A session of its own, so a hang can be ended by killing exactly the launcher and its workers.
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # torchrun starts each worker in a session of its own: they are found as the launcher's descendants, and
        # killed with it, before they could keep the output pipe open forever.
        workers = psutil.Process(process.pid).children(recursive=True)
        os.killpg(process.pid, signal.SIGKILL)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        output, _ = process.communicate()
        pytest.fail(f"{HANG_MESSAGE} {timeout_s} s:\n{output[-4000:]}")
    return process.returncode, output


def trl_accelerate_config(name: str) -> Path:
    """TRL's own accelerate config `name` (`zero3`, `fsdp2`, ...), shipped in its wheel: the file `trl grpo
    --accelerate_config NAME` uses."""
    import trl

    return Path(trl.__file__).resolve().parent / "accelerate_configs" / f"{name}.yaml"


def accelerate_launch_command(config_file, script, *args, num_processes: int = 2) -> list[str]:
    """`accelerate launch` of `script` on `num_processes` processes (two by default) on a free local port, with accelerate config `config_file`,
    in fp32: TRL's YAMLs ask for bf16, which these CPU runs replace by fp32, so that two sides computed alike (rank
    against rank, resume against the uninterrupted run) compare exactly."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
        "--num_processes", str(num_processes), "--mixed_precision", "no", "--main_process_ip", "127.0.0.1",
        "--main_process_port", str(free_port()), str(script), *map(str, args),
    ]  # fmt: skip


def interruptible_popen(command: list[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen` whose child takes SIGINT as Ctrl-C (KeyboardInterrupt) even where the test run itself
    ignores it: a shell starts a background job (`pytest ... &`) with SIGINT ignored, children inherit that, and
    Python then installs no KeyboardInterrupt handler."""
    return subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kwargs)


def command_help(capsys, command: str) -> str:
    """What `trl-variants COMMAND --help` prints; the command must exit 0."""
    from trl_variants.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def baseline_in_full_suite(trainer_names):
    """`trainer_names` as test parameters, TRL's `GRPOTrainer` marked slow: the fast loop (`pytest -m "not slow"`)
    runs the package's trainers, the full suite runs TRL's baseline beside them."""
    return [pytest.param(name, marks=pytest.mark.slow) if name == "GRPOTrainer" else name for name in trainer_names]


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str):
    """examples/NAME.py as a module, without running its `main`."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
