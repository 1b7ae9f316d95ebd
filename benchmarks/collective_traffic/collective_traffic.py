"""What each process receives through collectives per optimizer step, and the generated rows it holds, for
`GRPOTrainer` and `DAPOTrainer` on several gloo processes: before and after a change, in one run.

    python -m benchmarks.collective_traffic.collective_traffic --package before=DIR --package after=. \
        [--processes 2 4] [--lengths 32 128] [--steps 4] [--seeds 0 1 2] \
        [--output benchmarks/collective_traffic/results/collective_traffic.md]
    python -m benchmarks.collective_traffic.collective_traffic --replot   # the report again from the JSON beside it

Each `--package NAME=DIR` names a directory holding a `trl_variants` package (e.g. a `git archive` of an older
commit); every setting runs once per package and seed (`--seeds`: the trainers' seed, which orders the data and
draws the refills), so the packages are compared on the same model, data, seed and reward. A setting is
`torchrun --nproc_per_node P` on the CPU (gloo) with completions of exactly L tokens
(`min_new_tokens` = `max_completion_length` = L), training three arms one after the other: `GRPOTrainer`,
`DAPOTrainer` as published (no prompt skipping, no carrying), and `DAPOTrainer` with
`dynamic_sampling_carry_surplus=True` (no prompt skipping).

Traffic: every Python-level collective of `torch.distributed` (all_gather, all_gather_into_tensor, all_reduce,
broadcast, reduce, gather, scatter, all_to_all, batch_isend_irecv) is wrapped, and each process counts the bytes
that arrive in its buffers from other processes: the other processes' parts of a gather, the whole tensor of an
all-reduce or of a broadcast it does not send, the buffers of its receives. `gather_object` and
`broadcast_object_list` run through these, so their pickled payloads and size headers are counted. DDP's gradient
all-reduce runs in C++ and is not counted; it is the same for every arm. Counting starts at the first optimizer
step (setup is excluded) and is divided by the number of steps.

Memory: every live `GeneratedRow` (the record dynamic sampling keeps per generated completion) is tracked; its
payload is counted as 8 bytes per token id, sampling log-prob, tool-mask entry and reward (older versions: the
element size of a rewards tensor), the element size of its generating log-probs and the pickled size of its prompt row and extra fields. The peak over the run, in
rows and bytes, is sampled after every collective and at the keep/drop decision. `GRPOTrainer` keeps no such
record; its own rows per process are reported instead.

Time: wall seconds per optimizer step (`on_step_begin` to `on_step_end`), the first step excluded; the 1-minute
load average before and after each torchrun is saved beside it, since other work on the machine slows every step.
In versions that gather every round's rows to every process (`gather_object(records)`, e.g. 9f9d3f7), the pickled
size of the rows each process sends and the token ids and log-probs in them are recorded too.

The reward is keyed on the prompt (an even first operand makes a group informative, any other prompt gives every
completion 0), so about half the groups are informative and the rounds are the same for every package.
"""

import argparse
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.collective_traffic.collective_traffic_report import (  # noqa: F401
    ARMS, NUM_GENERATIONS, PER_DEVICE_BATCH, per_token_costs, projection, report,
)
from benchmarks.collective_traffic.traffic_probes import RowMemory, Traffic

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "collective_traffic.md"


# Worker: one torchrun process.


def half_informative_reward(prompts, completions, **kwargs):
    """An even first operand: the completion's position in its pair (informative group); otherwise 0."""
    return [float(i % 2) if int(prompt.split("+", 1)[0]) % 2 == 0 else 0.0 for i, prompt in enumerate(prompts)]


def run_worker(args) -> None:
    sys.path.insert(0, str(Path(args.package_dir).resolve()))
    import copy

    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import trl_variants
    from trl_variants import DAPOConfig, DAPOTrainer
    from trl_variants.toy import make_toy_task

    assert Path(trl_variants.__file__).resolve().is_relative_to(Path(args.package_dir).resolve()), trl_variants.__file__
    torch.set_num_threads(1)
    memory = RowMemory()
    # A generated row's record, and the module whose `select_groups` the step's decision calls: `placement` and
    # `selection` now, `trainer` (and `rounds`) in the versions compared before.
    modules = [importlib.import_module(f"trl_variants.dynamic_sampling.{name}")
               for name in ("trainer", "placement", "sampler")
               if importlib.util.find_spec(f"trl_variants.dynamic_sampling.{name}")]  # fmt: skip
    if importlib.util.find_spec("trl_variants.dynamic_sampling.rounds"):
        modules.append(importlib.import_module("trl_variants.dynamic_sampling.rounds"))
    memory.track(next(module.GeneratedRow for module in modules if hasattr(module, "GeneratedRow")))
    traffic = Traffic(on_call=memory.sample)
    traffic.install()
    # The decision: `select_groups` in the versions compared before, `sampler.decide_round` since the rows are
    # gathered again (every process holds every row; the peak is sampled at the decision all the same).
    selection = importlib.import_module("trl_variants.dynamic_sampling.selection")
    deciding, name = next(
        (module, function) for module, function in [(modules[0], "select_groups"), (selection, "select_groups")]
        + [(module, "decide_round") for module in modules] if hasattr(module, function)
    )
    decide = getattr(deciding, name)

    def sampling_decision(*call_args, **call_kwargs):
        memory.sample()
        return decide(*call_args, **call_kwargs)

    setattr(deciding, name, sampling_decision)
    # Versions that gather every round's rows to every process (`gather_object(records)`): what this process sends.
    gathered = {"calls": 0, "rows": 0, "bytes": 0, "ids": 0, "logprobs": 0}
    # `trainer` (9f9d3f7's `_generate_round`) or `sampler` (`generate_round`) calls `gather_object(rows)`.
    gathering = next((module for module in modules if hasattr(module, "gather_object")), None)
    if gathering is not None:
        gather_object = gathering.gather_object

        def measuring_gather_object(objects):
            if objects and all(type(row).__name__ == "GeneratedRow" for row in objects):
                gathered["calls"] += 1
                gathered["rows"] += len(objects)
                gathered["bytes"] += len(pickle.dumps(objects))  # as `all_gather_object` pickles it
                gathered["ids"] += sum(len(row.prompt_ids) + len(row.completion_ids) for row in objects)
                gathered["logprobs"] += sum(len(row.logprobs or []) for row in objects)
            return gather_object(objects)

        gathering.gather_object = measuring_gather_object

    class Window(TrainerCallback):
        """Counts from the first optimizer step on, notes how many rows had been generated as each step began, and
        times each optimizer step (wall clock, `on_step_begin` to `on_step_end`)."""

        def __init__(self, generated: list[int]):
            self.generated, self.step_starts, self.step_seconds = generated, [], []

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:
                traffic.bytes = traffic.calls = 0
                memory.reset()
                gathered.update(dict.fromkeys(gathered, 0))
            self.step_starts.append(sum(self.generated))
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_seconds.append(time.perf_counter() - self.began)

    task = make_toy_task(seed=0, warm_start_steps=20)
    pristine = copy.deepcopy(task.model)
    results = {}
    for arm in ARMS:
        config_class = GRPOConfig if arm == "GRPOTrainer" else DAPOConfig
        trainer_class = GRPOTrainer if arm == "GRPOTrainer" else DAPOTrainer
        # The arms measured when skipping and carrying were off by default, so named: no skipping, carrying by arm.
        extra = {} if arm == "GRPOTrainer" else {
            "skip_degenerate_prompts": False, "dynamic_sampling_carry_surplus": arm.endswith("carry"),
        }  # fmt: skip
        config = config_class(
            str(Path(args.work_dir) / arm.replace(" ", "_")),
            use_cpu=True, bf16=False, per_device_train_batch_size=PER_DEVICE_BATCH, num_generations=NUM_GENERATIONS,
            max_completion_length=args.length, generation_kwargs={"min_new_tokens": args.length},
            learning_rate=1e-3, max_steps=args.steps, logging_steps=1, report_to=[], save_strategy="no",
            seed=args.seed, disable_tqdm=True, **extra,
        )  # fmt: skip
        generated_local = []
        window = Window(generated_local)
        trainer = trainer_class(
            copy.deepcopy(pristine), [half_informative_reward], args=config, train_dataset=task.train_dataset,
            processing_class=task.tokenizer, callbacks=[window],
        )  # fmt: skip
        generate = trainer._generate

        def counting_generate(prompts, generate=generate, generated_local=generated_local):
            generated_local.append(len(prompts))
            return generate(prompts)

        trainer._generate = counting_generate
        received_rows = []
        # Versions with the row exchange: rows received to train or carry. The sampler's `exchange_rows` now, the
        # trainer's `_exchange_rows` in the versions compared before (d807747 and earlier).
        sampler = getattr(trainer, "dynamic_sampler", None)
        owner, name = (sampler, "exchange_rows") if hasattr(sampler, "exchange_rows") else (trainer, "_exchange_rows")
        if hasattr(owner, name):
            exchange_rows = getattr(owner, name)

            def counting_exchange(outgoing, senders, exchange_rows=exchange_rows, received_rows=received_rows):
                received = exchange_rows(outgoing, senders)
                received_rows.append(sum(len(rows) for rows in received.values()))
                return received

            setattr(owner, name, counting_exchange)
        trainer.train()
        logs = [entry for entry in trainer.state.log_history if "loss" in entry and "train_runtime" not in entry]
        replayed = PER_DEVICE_BATCH if arm != ARMS[0] else 0  # TRL's scoring pass of the kept rows
        step_ends = [*window.step_starts[1:], sum(generated_local)]
        results[arm] = {
            "bytes_per_step": traffic.bytes / args.steps,
            "calls_per_step": traffic.calls / args.steps,
            "peak_rows": memory.peak_rows,
            "peak_row_bytes": memory.peak_bytes,
            # Rows this process generated per step (every `_generate` call, less the replay into TRL's scoring).
            "generated_rows_per_step": (sum(generated_local) - (args.steps * PER_DEVICE_BATCH if arm != ARMS[0] else 0))
            / args.steps,
            "most_generated_rows_in_a_step": max(
                end - start - replayed for start, end in zip(window.step_starts, step_ends, strict=True)
            ),
            "generated_groups_per_step": sum(entry.get("dynamic_sampling/generated_groups", 0) for entry in logs)
            / args.steps,
            "received_rows_per_step": sum(received_rows[-args.steps :]) / args.steps if received_rows else None,
            "losses": [entry["loss"] for entry in logs],
            "step_seconds": window.step_seconds,
            "gathered_rows": dict(gathered),
        }
        del trainer
    rank = int(os.environ["RANK"])
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(results))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# Orchestrator.


def launch(package_dir: str, processes: int, length: int, steps: int, seed: int, out_dir: Path) -> list[dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work_dir:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", __spec__.name, "--worker",
            "--package-dir", package_dir, "--length", str(length), "--steps", str(steps), "--seed", str(seed),
            "--out", str(out_dir),
            "--work-dir", work_dir,
        ]  # fmt: skip
        environment = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
        # The worker puts the package under test first on its path; `benchmarks` comes from the repository root.
        environment.pop("PYTHONPATH", None)
        result = subprocess.run(command, env=environment, cwd=REPO_ROOT, capture_output=True, text=True)
        if result.returncode:
            output = f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
            raise RuntimeError(f"the {processes}-process run of {package_dir} failed:\n{output}")
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(processes)]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def summarize(ranks: list[dict]) -> dict:
    """Per arm: the mean over processes of bytes and calls per step, the largest peak over processes."""
    summary = {}
    for arm in ARMS:
        values = [rank[arm] for rank in ranks]
        summary[arm] = {
            "bytes_per_step": sum(v["bytes_per_step"] for v in values) / len(values),
            "max_bytes_per_step": max(v["bytes_per_step"] for v in values),
            "calls_per_step": values[0]["calls_per_step"],
            "peak_rows": max(v["peak_rows"] for v in values),
            "peak_row_bytes": max(v["peak_row_bytes"] for v in values),
            "generated_rows_per_step": max(v["generated_rows_per_step"] for v in values),
            "most_generated_rows_in_a_step": max(v.get("most_generated_rows_in_a_step", 0) for v in values),
            "generated_groups_per_step": values[0]["generated_groups_per_step"],
            "received_rows_per_step": None
            if values[0]["received_rows_per_step"] is None
            else sum(v["received_rows_per_step"] for v in values) / len(values),
            "losses": values[0]["losses"],
            # The first step carries first-call setup: mean over the later steps, then over processes.
            # What the gather design's processes sent of their generated rows, summed over processes.
            "gathered_rows": {key: sum(v["gathered_rows"][key] for v in values) for key in values[0]["gathered_rows"]},
            "seconds_per_step": sum(sum(v["step_seconds"][1:]) / len(v["step_seconds"][1:]) for v in values)
            / len(values),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="the trainers' seed: data order, refills")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--replot", action="store_true", help="rewrite the report from the JSON beside --output")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--package-dir", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    if args.replot:
        saved = json.loads(args.output.with_suffix(".json").read_text())
        results = {}
        for key, run in saved["runs"].items():
            name, processes, length, *seed = key.split("/")  # runs saved before --seeds ran seed 0 only
            results.setdefault((name, int(processes), int(length)), {})[int(seed[0]) if seed else 0] = run["summary"]
        args.output.write_text(report(results, saved["machine"], saved["steps"]))
        print(f"wrote {args.output}")
        return
    from trl_variants.machine import describe_machine

    packages = dict(entry.split("=", 1) for entry in args.package) or {"current": str(REPO_ROOT)}
    results, raw = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        for processes in args.processes:
            for length in args.lengths:
                for seed in args.seeds:
                    for name, package_dir in packages.items():
                        out_dir = Path(scratch) / f"{name}_{processes}_{length}_{seed}"
                        load_before = os.getloadavg()
                        ranks = launch(package_dir, processes, length, args.steps, seed, out_dir)
                        # The machine's load beside the times: other work on its cores slows every step.
                        load = {"before": load_before, "after": os.getloadavg()}
                        summary = summarize(ranks)
                        results.setdefault((name, processes, length), {})[seed] = summary
                        raw[f"{name}/{processes}/{length}/{seed}"] = {"summary": summary, "ranks": ranks, "load": load}
                        print(f"{name} P={processes} L={length} seed={seed} load={load['after'][0]:.2f}:",
                              {arm: (round(v["bytes_per_step"]), round(v["seconds_per_step"], 3))
                               for arm, v in summary.items()}, flush=True)  # fmt: skip
    machine = describe_machine()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report(results, machine, args.steps))
    args.output.with_suffix(".json").write_text(
        json.dumps({"machine": machine, "steps": args.steps, "packages": packages, "runs": raw}, indent=1)
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
