"""The example scripts: those that can run offline are run on the toy task with a few steps; the vLLM ones build
their configs (vLLM and GPUs are not available here); the accelerate launch lines are parsed and resolved."""

import py_compile
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from trl import GRPOTrainer

from trl_variants import DAPOTrainer, DrGRPOTrainer
from trl_variants.cli.args import VARIANTS, parse_command
from trl_variants.cli.launch import accelerate_launch_options, build_launch_namespace

from ..helpers import EXAMPLES, load_example


@pytest.fixture
def two_threads():
    """torch on two threads, as on a 2-core machine without OMP_NUM_THREADS; the toy examples must pin one (with
    two they took 142 s instead of 53 s for `train_toy_dapo.py`)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda path: path.name)
def test_example_compiles(path):
    py_compile.compile(str(path), doraise=True)


@pytest.mark.slow
def test_swap_from_grpo_trains_with_all_three_trainers(tmp_path, two_threads):
    trainers = load_example("swap_from_grpo").main(str(tmp_path), steps=2)
    assert torch.get_num_threads() == 1
    assert [type(trainer) for trainer in trainers] == [GRPOTrainer, DAPOTrainer, DrGRPOTrainer]
    assert all(trainer.state.global_step == 2 for trainer in trainers)
    assert trainers[1].args.epsilon_high == 0.28 and trainers[2].args.scale_rewards == "none"
    assert not any(trainer.args.bf16 for trainer in trainers)  # float32: bfloat16 autocast is slow on CPUs without bf16 arithmetic


@pytest.mark.slow
def test_train_toy_dapo_runs(tmp_path, two_threads):
    before, after = load_example("train_toy_dapo").main(str(tmp_path), steps=2)
    assert torch.get_num_threads() == 1
    assert 0.0 < before < 1.0 and 0.0 <= after <= 1.0
    assert (tmp_path / "model.safetensors").is_file()


@pytest.mark.slow
def test_lora_example_trains_only_the_adapter(tmp_path, two_threads):
    trainer = load_example("lora_peft").main(str(tmp_path), steps=2)
    assert torch.get_num_threads() == 1
    assert isinstance(trainer.model, PeftModel)
    assert not trainer.args.bf16
    trainable = [name for name, parameter in trainer.model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert (tmp_path / "adapter_model.safetensors").is_file() and not (tmp_path / "model.safetensors").exists()


def test_vllm_colocate_example_config(tmp_path):
    config = load_example("vllm_colocate").make_config(str(tmp_path), use_cpu=True)
    assert config.use_vllm and config.vllm_mode == "colocate" and config.vllm_enable_sleep_mode


def test_vllm_server_example_config(tmp_path):
    config = load_example("vllm_server").make_config(str(tmp_path), host="10.0.0.7", port=8001, use_cpu=True)
    assert config.use_vllm and config.vllm_mode == "server"
    assert config.vllm_server_base_url == "http://10.0.0.7:8001"


def shell_commands(script: Path) -> list[list[str]]:
    """The `trl-variants` command lines of a shell script, continuations joined and `${VAR:-default}` expanded."""
    text = script.read_text().replace("\\\n", " ")
    text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", text)
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("trl-variants ")]


def test_multi_gpu_script_commands_resolve_to_accelerate_launches(monkeypatch):
    script = EXAMPLES / "multi_gpu.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    monkeypatch.chdir(EXAMPLES.parent)  # the script's recipe paths are relative to the repository root
    commands = shell_commands(script)
    assert len(commands) == 4
    launched_configs = set()
    for _, command, *arguments in commands:
        parsed = parse_command(VARIANTS[command], [*arguments, "--use_cpu", "true"], accelerate_launch_options())
        namespace = build_launch_namespace(command, parsed.launch_args, parsed.training_script_args)
        launched_configs.add(Path(namespace.config_file).stem)
        assert namespace.training_script == "trl_variants.cli" and namespace.training_script_args[0] == command
        if "--num_machines" in arguments:
            assert (namespace.num_machines, namespace.num_processes) == (2, 16)
    assert launched_configs == {"multi_gpu", "zero3", "fsdp2"}
