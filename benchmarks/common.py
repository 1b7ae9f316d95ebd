"""Shared pieces of the benchmark scripts: the toy-task settings, the policy loader, trainer configuration,
instrumentation (step timer, generated-token counter, phase timers, peak memory) and the machine description.

The scripts are run as `python benchmarks/<script>.py`, so this module is imported as `common`.
"""

import argparse
import atexit
import copy
import ctypes
import functools
import gc
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from transformers.trainer_callback import PrinterCallback, ProgressCallback  # noqa: E402

from trl_variants.machine import cpu_model, usable_cpus  # noqa: E402
from trl_variants.toy import greedy_accuracy, make_toy_task  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# `DAPOTrainer` exactly as the paper publishes it: both of dynamic sampling's savings off (they are on by default).
DAPO_AS_PUBLISHED = {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": False}


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


def add_common_arguments(parser: argparse.ArgumentParser, defaults: TaskSettings) -> None:
    parser.add_argument("--model_path", default=None, help="Local model directory; default: the toy task's policy.")
    parser.add_argument("--use_vllm", action="store_true", help='Generate with vLLM (vllm_mode="colocate").')
    parser.add_argument("--smoke", action="store_true", help="Tiny configuration (a few steps, one seed).")
    parser.add_argument("--output_dir", default=DEFAULT_OUTPUT_DIR, help="Where tables, JSON and plots are written.")
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


@dataclass
class Policy:
    """A task (prompts, answers, held-out problems) and the policy that all trainers start from."""

    task: object
    model: torch.nn.Module
    tokenizer: object

    def fresh_model(self) -> torch.nn.Module:
        return copy.deepcopy(self.model)

    def held_out_accuracy(self, model) -> float:
        return greedy_accuracy(model, self.tokenizer, self.task.eval_problems)


def load_policy(seed: int, settings: TaskSettings, model_path: str | None, use_vllm: bool = False) -> Policy:
    """The toy task for `seed`; its warm-started policy, or the model and tokenizer stored at `model_path`.

    With `use_vllm` and no `model_path`, the toy policy is built with 32-wide attention heads (2 heads; vLLM's CPU
    backend accepts no smaller) and loaded back from a temporary folder, since vLLM loads a model by its path.
    """
    task = make_toy_task(
        seed=seed,
        max_operand=settings.max_operand,
        warm_start_steps=0 if model_path else settings.warm_start_steps,
        hidden_size=settings.hidden_size,
        num_layers=settings.num_layers,
        num_attention_heads=2 if use_vllm and model_path is None else 4,
    )
    if model_path is None and use_vllm:
        model_path = tempfile.mkdtemp(prefix="toy_policy_")
        atexit.register(shutil.rmtree, model_path, ignore_errors=True)
        task.model.save_pretrained(model_path)
        task.tokenizer.save_pretrained(model_path)
    if model_path is None:
        return Policy(task=task, model=task.model, tokenizer=task.tokenizer)
    if not os.path.isdir(model_path):
        raise ValueError(f"--model_path={model_path!r} is not a directory; pass a local model directory.")
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return Policy(task=task, model=model, tokenizer=tokenizer)


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


def build_trainer(trainer_class, config, policy: Policy, model=None, reward_funcs=None, callbacks=()):
    trainer = trainer_class(
        model if model is not None else policy.fresh_model(),
        reward_funcs if reward_funcs is not None else policy.task.reward_funcs,
        args=config,
        train_dataset=policy.task.train_dataset,
        processing_class=policy.tokenizer,
        callbacks=list(callbacks),
    )
    # The per-step log dictionaries would flood the output; they stay in `trainer.state.log_history`.
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepTimer(TrainerCallback):
    """Wall time and process CPU time of each optimizer step (generation, scoring, backward and optimizer
    update). On a shared machine the CPU time is the steadier of the two: other processes' load stretches the
    wall time but not the CPU time this process spends."""

    def __init__(self):
        self.durations: list[float] = []
        self.cpu_durations: list[float] = []
        self._start = self._cpu_start = None

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        self._start, self._cpu_start = time.perf_counter(), time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        self.durations.append(time.perf_counter() - self._start)
        self.cpu_durations.append(time.process_time() - self._cpu_start)


class GenerationCounter:
    """Counts the completion tokens a trainer really generates, by wrapping its `_generate_single_turn` on the
    instance: every sampling call goes through it (transformers or vLLM), while dynamic sampling's replay of
    already generated completions does not."""

    def __init__(self, trainer):
        self.tokens = 0
        self.completions = 0
        self.calls = 0
        original = trainer._generate_single_turn

        @functools.wraps(original)
        def counted(*args, **kwargs):
            completion_ids, logprobs = original(*args, **kwargs)
            self.calls += 1
            self.completions += len(completion_ids)
            self.tokens += sum(len(ids) for ids in completion_ids)
            return completion_ids, logprobs

        trainer._generate_single_turn = counted


class PhaseTimer:
    """Accumulates wall time per named phase; `wrap_method` times a method of one trainer instance."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active: set[str] = set()

    def wrap_method(self, obj, method_name: str, phase) -> None:
        """Times `obj.method_name`; `phase` is a name or a function of this timer giving the name per call."""
        original = getattr(obj, method_name)
        setattr(obj, method_name, self.timed(original, phase, marks_active=method_name))

    def timed(self, func, phase, marks_active=None):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            name = phase(self) if callable(phase) else phase
            if marks_active:
                self.active.add(marks_active)
            synchronize()
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                synchronize()
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1
                if marks_active:
                    self.active.discard(marks_active)

        return wrapper


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _heap_in_use_reader():
    """Bytes currently allocated through malloc (glibc `mallinfo2`), or None where it is unavailable.

    Unlike the peak RSS, this falls when memory is freed, so trainers measured one after the other in the same
    process each get their own peak; torch's CPU tensors are allocated through malloc and are included.
    """
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2

    def read() -> int:
        info = mallinfo2()
        return info.uordblks + info.hblkhd

    return read


class PeakMemory:
    """Peak memory allocated above the level at `start()`: CUDA's allocator statistics on a GPU, otherwise the
    malloc heap sampled by a background thread every `interval` seconds."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.on_gpu = torch.cuda.is_available()
        self._read_heap = None if self.on_gpu else _heap_in_use_reader()
        self.available = self.on_gpu or self._read_heap is not None
        self.kind = "torch.cuda.max_memory_allocated" if self.on_gpu else "malloc heap in use (glibc mallinfo2)"

    def start(self) -> None:
        # Garbage of earlier runs freed mid-measurement would hide this run's allocations.
        gc.collect()
        if self.on_gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._baseline = torch.cuda.memory_allocated()
            return
        if self._read_heap is None:
            return
        self._baseline = self._peak = self._read_heap()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self._read_heap())
            time.sleep(self.interval)

    def stop(self) -> float | None:
        """Peak increase in MiB since `start()`, or None where memory cannot be measured."""
        if self.on_gpu:
            torch.cuda.synchronize()
            return (torch.cuda.max_memory_allocated() - self._baseline) / 2**20
        if self._read_heap is None:
            return None
        self._stop.set()
        self._thread.join()
        return (max(self._peak, self._read_heap()) - self._baseline) / 2**20


def load_average() -> str:
    """The 1-minute load average: on a shared machine it says how much other work the timings competed with."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def machine_description(num_threads: int, load_at_start: str) -> dict[str, str]:
    description = {
        "cpu": cpu_model(),
        "nproc": str(usable_cpus()),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "torch threads": str(num_threads),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "load average at start": load_at_start,
        "load average at end": load_average(),
    }
    return description


def write_json(data, path: str, digits: int = 6) -> None:
    """Writes `data` with floats rounded to `digits` significant digits (the timings' noise is far larger)."""

    def rounded(value):
        if isinstance(value, float):
            return float(f"{value:.{digits}g}")
        if isinstance(value, dict):
            return {key: rounded(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [rounded(item) for item in value]
        return value

    with open(path, "w") as handle:
        json.dump(rounded(data), handle)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine_markdown(machine: dict[str, str]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in machine.items())
