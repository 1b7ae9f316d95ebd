"""The toy-task settings every compared trainer shares, their command-line options, and the trainer config fields
common to all arms (only the algorithm's own fields differ between arms)."""

import argparse
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

REPO_ROOT = Path(__file__).resolve().parents[2]
# `DAPOTrainer` exactly as the paper publishes it: both of dynamic sampling's savings off (they are on by default).
DAPO_AS_PUBLISHED = {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": False}
# The soft overlong punishment's buffer, as a share of the length limit (DAPO: 4096 of 20480 tokens).
OVERLONG_BUFFER_SHARE = 0.25


def overlong_buffer_length(max_completion_length: int) -> int:
    """DAPO's overlong buffer for a length limit: `OVERLONG_BUFFER_SHARE` of it, rounded, at least 1 token."""
    return max(1, round(max_completion_length * OVERLONG_BUFFER_SHARE))


@dataclass
class TaskSettings:
    """Toy-task difficulty and the training settings every compared trainer shares."""

    max_operand: int = 19
    warm_start_steps: int = 300
    hidden_size: int = 64
    num_layers: int = 2
    batch_size: int = 32
    num_generations: int = 4
    max_completion_length: int = 6
    learning_rate: float = 3e-4
    max_steps: int = 300
    # Optimizer steps per generation batch; above 1 the later steps train off-policy, where clipping acts.
    steps_per_generation: int = 1


# Small enough that a whole script finishes in seconds; only checks that the scripts still run.
SMOKE_SETTINGS = TaskSettings(
    max_operand=9, warm_start_steps=20, batch_size=8, num_generations=4, max_completion_length=4, max_steps=3
)


def add_common_arguments(parser: argparse.ArgumentParser, defaults: TaskSettings, output_dir: Path) -> None:
    """The options of the scripts that train on the toy task: every `TaskSettings` field, the model, vLLM, smoke
    mode, the output folder (default `output_dir`) and the torch thread count."""
    parser.add_argument("--model_path", default=None, help="Local model directory; default: the toy task's policy.")
    parser.add_argument("--use_vllm", action="store_true", help='Generate with vLLM (vllm_mode="colocate").')
    parser.add_argument("--smoke", action="store_true", help="Tiny configuration (a few steps, one seed).")
    parser.add_argument("--output_dir", default=str(output_dir), help="Where tables, JSON and plots are written.")
    parser.add_argument("--num_threads", type=int, default=1, help="torch CPU threads (1 keeps runs comparable).")
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name}", type=type(value), default=None, help=f"default {value}")


def add_seeded_report_arguments(parser: argparse.ArgumentParser, default_seeds: list[int], default_output) -> None:
    """The options of the scripts that run their arms per seed in worker processes and write one report."""
    shown_output = Path(default_output).resolve().relative_to(REPO_ROOT)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help=f"default {default_seeds}")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one torch thread each")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that only checks the script works")
    parser.add_argument(
        "--output", default=None, help=f"report path (default {shown_output}; --smoke writes only when given)"
    )


def resolve_settings(
    args: argparse.Namespace, defaults: TaskSettings, smoke_defaults: TaskSettings = SMOKE_SETTINGS
) -> TaskSettings:
    """`--smoke` picks the smoke settings; any explicitly given setting flag overrides either."""
    base = smoke_defaults if args.smoke else defaults
    overrides = {name: getattr(args, name) for name in asdict(base) if getattr(args, name) is not None}
    settings = TaskSettings(**{**asdict(base), **overrides})
    if settings.batch_size % settings.num_generations:
        raise ValueError(
            f"--batch_size={settings.batch_size} must be a multiple of --num_generations={settings.num_generations} "
            "(every prompt group is generated whole on one process)."
        )
    return settings


def configure_runtime(num_threads: int) -> None:
    if num_threads < 1:
        raise ValueError(f"--num_threads must be >= 1, got {num_threads}.")
    torch.set_num_threads(num_threads)
    transformers.logging.set_verbosity_error()


def configure_vllm(use_vllm: bool) -> None:
    """Without a GPU, vLLM runs on its CPU backend: it needs the target named, a KV-cache size (GiB) and an
    address for its engine. Values already set in the environment win."""
    if use_vllm and not torch.cuda.is_available():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")


def training_kwargs(settings: TaskSettings, seed: int, use_vllm: bool) -> dict:
    """Config fields shared by every compared trainer; only the algorithm's own fields differ between them."""
    on_gpu = torch.cuda.is_available()
    kwargs = dict(
        use_cpu=not on_gpu,
        bf16=on_gpu,
        per_device_train_batch_size=settings.batch_size,
        steps_per_generation=settings.steps_per_generation,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        max_steps=settings.max_steps,
        beta=0.0,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
    )
    if use_vllm:
        kwargs.update(use_vllm=True, vllm_mode="colocate")
    return kwargs
