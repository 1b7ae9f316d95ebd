"""Real `generate` calls on CPU, their host peak measured, against the call sizes the package's memory plan chooses
under a budget (method: benchmarks/generation_memory/README.md).

    python -m benchmarks.generation_memory.generation_memory [--smoke] [--out DIR]
"""

import argparse
import gc
import json
import os
import platform
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from trl_variants.dynamic_sampling.generation_memory import CallPeak, call_rows
from trl_variants.machine import cpu_model

UNIT = 8  # completions per group
FLOOR = 16  # rows of one generation batch: GRPOTrainer's call
BUDGET_TIMES_FLOOR_PEAK = 6
MIB = 2**20


@dataclass
class Shape:
    name: str
    model_type: str
    config: dict
    prompt_tokens: int
    completion_tokens: int
    measured_prompt_tokens: int | None = None  # the first call's prompt, where it differs from the planned one
    autocast_bf16: bool = False
    sampling: dict = field(default_factory=dict)


BASE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
            vocab_size=8192, max_position_embeddings=2048)  # fmt: skip
SHAPES = [
    Shape("long prompt (P 512, C 16)", "llama", BASE, 512, 16),
    Shape("long completion (P 32, C 256)", "llama", BASE, 32, 256),
    Shape("GQA (16 heads, 2 KV heads)", "qwen2", {**BASE, "num_attention_heads": 16, "num_key_value_heads": 2}, 128, 128),
    Shape("sliding window 64 (Mistral)", "mistral", {**BASE, "sliding_window": 64}, 192, 128),
    Shape("float32 under bf16 autocast", "llama", BASE, 256, 64, autocast_bf16=True),
    Shape("sampling: T 0.7, top-p 0.9, top-k 50, 128k vocab", "llama", {**BASE, "vocab_size": 128_000}, 64, 64,
          sampling=dict(temperature=0.7, top_p=0.9, top_k=50)),
    Shape("prompt 2x the measured call's (256 -> 512)", "llama", BASE, 512, 32, measured_prompt_tokens=256),
]
SMOKE_SHAPES = [
    Shape("smoke: long prompt", "llama", {**BASE, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                           "vocab_size": 512}, 64, 4),
    Shape("smoke: bf16 autocast", "llama", {**BASE, "hidden_size": 64, "intermediate_size": 128,
                                             "num_hidden_layers": 2, "vocab_size": 512}, 16, 8, autocast_bf16=True),
]


def status_kib(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def measured_peak(model, rows: int, shape: Shape, prompt_tokens: int) -> tuple[int, int]:
    """The host peak above the resting memory of one real `generate` call, and the longest completion it made."""
    generator = torch.Generator().manual_seed(rows)
    prompts = torch.randint(0, model.config.vocab_size, (rows, prompt_tokens), generator=generator)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    resting = status_kib("VmRSS")
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if shape.autocast_bf16 else nullcontext()
    with torch.no_grad(), autocast:
        out = model.generate(
            input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True, pad_token_id=0,
            min_new_tokens=shape.completion_tokens, max_new_tokens=shape.completion_tokens, **shape.sampling,
        )  # fmt: skip
    peak = (status_kib("VmHWM") - resting) * 1024
    new_tokens = out.shape[1] - prompt_tokens
    del out, prompts
    gc.collect()
    return peak, new_tokens


def largest_fitting(model, shape: Shape, budget: int, start: int, peaks: dict) -> int:
    """The most rows (whole units) whose measured peak is within `budget`: doubling from `start` until a call does
    not fit, then halving the interval (every probe a real call; peaks grow with rows)."""

    def fits(rows):
        if rows not in peaks:
            peaks[rows] = measured_peak(model, rows, shape, shape.prompt_tokens)[0]
        return peaks[rows] <= budget

    low, high = 0, start
    while fits(high):
        low, high = high, 2 * high
    while high - low > UNIT:
        middle = (low + high) // 2 // UNIT * UNIT
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def run_shape(shape: Shape) -> dict:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(shape.model_type, **shape.config)).eval()
    measured_prompt = shape.measured_prompt_tokens or shape.prompt_tokens
    measured_peak(model, UNIT, shape, measured_prompt)  # warm-up: one-time allocations are not a call's
    floor_peak, floor_new = measured_peak(model, FLOOR, shape, measured_prompt)
    budget = round(BUDGET_TIMES_FLOOR_PEAK * floor_peak / MIB) * MIB
    measurements = [CallPeak(FLOOR, measured_prompt, floor_new, floor_peak)]
    chosen, chosen_peaks = [], []
    for _ in range(2):  # rounds 2 and 3
        rows = call_rows(measurements, budget, shape.prompt_tokens, shape.completion_tokens, UNIT, FLOOR)
        peak, new_tokens = measured_peak(model, rows, shape, shape.prompt_tokens)
        measurements.append(CallPeak(rows, shape.prompt_tokens, new_tokens, peak))
        chosen.append(rows), chosen_peaks.append(peak)
    peaks = {rows: peak for rows, peak in zip(chosen, chosen_peaks, strict=True)}
    largest = largest_fitting(model, shape, budget, max(chosen), peaks)
    return {
        "shape": shape.name, "model": shape.model_type, "P": shape.prompt_tokens, "C": shape.completion_tokens,
        "measured_P": measured_prompt, "floor_rows": FLOOR, "floor_peak_mib": floor_peak / MIB,
        "budget_mib": budget / MIB, "chosen_rows": chosen, "chosen_peak_mib": [p / MIB for p in chosen_peaks],
        "within_budget": [p <= budget for p in chosen_peaks], "largest_fitting_rows": largest,
        "chosen_over_largest": [rows / largest if largest else None for rows in chosen],
        "peaks_mib": {str(rows): peak / MIB for rows, peak in sorted(peaks.items())}, "config": asdict(shape)["config"],
    }  # fmt: skip


def table(results: list[dict]) -> str:
    lines = [
        "| shape | floor call peak (MiB) | budget (MiB) | round 2: rows, peak (MiB), peak/budget | round 3: rows, peak, "
        "peak/budget | largest fitting rows | chosen/largest (r2, r3) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rounds = [
            f"{rows}, {peak:.0f}, {peak / r['budget_mib']:.2f}"
            for rows, peak in zip(r["chosen_rows"], r["chosen_peak_mib"], strict=True)
        ]
        ratios = ", ".join(f"{x:.2f}" if x is not None else "-" for x in r["chosen_over_largest"])
        lines.append(f"| {r['shape']} | {r['floor_peak_mib']:.0f} | {r['budget_mib']:.0f} | {rounds[0]} | {rounds[1]} "
                     f"| {r['largest_fitting_rows']} | {ratios} |")  # fmt: skip
    return "\n".join(lines)


def with_mmap_threshold() -> None:
    """Runs this command again with `MALLOC_MMAP_THRESHOLD_=65536`, which glibc reads at start-up only: freed
    tensors then go back to the system, so that the high-water mark reads one call."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks.generation_memory.generation_memory", *sys.argv[1:]])


def main() -> None:
    with_mmap_threshold()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="two tiny shapes: checks the script works")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for shape in SMOKE_SHAPES if args.smoke else SHAPES:
        results.append(run_shape(shape))
        print(table(results[-1:]).splitlines()[-1], flush=True)
    machine = f"{cpu_model()}, torch {torch.__version__}, Python {platform.python_version()}, 1 torch thread"
    args.out.mkdir(parents=True, exist_ok=True)
    name = "generation_memory_smoke" if args.smoke else "generation_memory"
    (args.out / f"{name}.json").write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    report = (f"# Generation memory: chosen call sizes against measured peaks\n\nMachine: {machine}. Method: "
              f"[README](../README.md).\n\n{table(results)}\n")  # fmt: skip
    (args.out / f"{name}.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
