"""The row exchange against gathering every round's rows to every process: the report of the live run and its
projection to 8 GPUs x 1k rows per step x 4k tokens per row (method: `results/exchange_vs_gather_method.md`).

    python -m benchmarks.collective_traffic.collective_traffic --package gather=/tmp/pkg-9f9d3f7 --package exchange=. \
        --processes 2 4 --lengths 32 128 --steps 12 --seeds 0 1 2 3 4 \
        --output benchmarks/collective_traffic/results/exchange_vs_gather.md
    python -m benchmarks.collective_traffic.exchange_vs_gather

The second command reads `exchange_vs_gather.json` (written by the first), measures on this machine what pickle
writes per token id and log-prob and how long the gathered rows take to pickle and unpickle at the projected size,
runs the model-free exchange simulation at 8 processes, and rewrites `exchange_vs_gather.md`: the run's tables
(`collective_traffic_report.report`) followed by this study's.
"""

import argparse
import json
import os
import pickle
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.collective_traffic.collective_traffic_report import (
    PER_DEVICE_BATCH,
    mean_summary,
    report,
)
from benchmarks.collective_traffic.exchange_simulation import simulate
from benchmarks.shared.stats import t_interval
from trl_variants.machine import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"
ARM = "DAPOTrainer carry"  # the package's defaults: dynamic sampling with carrying, no prompt skipping
SMOLLM2_TOKENIZER = Path.home() / ".cache" / "trl-variants" / "SmolLM2-135M-Instruct" / "tokenizer.json"
REPO_ROOT = Path(__file__).resolve().parents[2]

# The projected setting.
PROCESSES = 8
TRAINED_ROWS = 1024  # per step, over all processes
IDS_PER_ROW = 4096  # prompt plus completion token ids
COMPLETION_TOKENS = 4096  # log-probs per row on the vLLM path (an upper bound: the completion part of the 4k)
MODELS = {"1.5B": 1.5e9, "7B": 7e9}
BF16 = 2
MATTERS = 0.10  # of the 1.5B model's all-reduce bytes per process (the method's rule)


@dataclass
class GatheredRow:
    """The fields `GeneratedRow` had at 9f9d3f7, the record `gather_object` sent for every generated row."""

    row: dict
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int] | None
    logprobs: list[float] | None
    extra: dict = field(default_factory=dict)
    extra_logs: dict = field(default_factory=dict)
    rewards: object = None
    generating_logps: object = None


def load_runs(path: Path) -> tuple[dict, dict]:
    saved = json.loads(path.read_text())
    results = {}
    for key, run in saved["runs"].items():
        name, processes, length, seed = key.split("/")
        results.setdefault((name, int(processes), int(length)), {})[int(seed)] = run["summary"]
    return saved, results


def pickled_bytes_per_item(values: list) -> float:
    return (len(pickle.dumps(values)) - len(pickle.dumps([]))) / len(values)


def real_token_ids(count: int) -> list[int]:
    """`count` SmolLM2 token ids of this repository's documentation (English prose, Markdown and code)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(SMOLLM2_TOKENIZER))
    text = "\n".join(path.read_text() for path in sorted((REPO_ROOT / "docs").glob("*.md")))
    ids = tokenizer.encode(text).ids
    assert len(ids) >= count, len(ids)
    return ids[:count]


def id_costs() -> dict:
    rng = random.Random(0)
    smollm2 = real_token_ids(IDS_PER_ROW)
    return {
        "toy ids (< 256)": pickled_bytes_per_item([rng.randrange(256) for _ in range(IDS_PER_ROW)]),
        "SmolLM2 ids of text (vocabulary 49,152)": pickled_bytes_per_item(smollm2),
        "ids at or above 65,536 (e.g. Qwen2.5's 151,646-token vocabulary)": pickled_bytes_per_item(
            [rng.randrange(65_536, 151_646) for _ in range(IDS_PER_ROW)]
        ),
        "log-prob (Python float)": pickled_bytes_per_item([-rng.expovariate(1.0) for _ in range(IDS_PER_ROW)]),
        "smollm2_ids": smollm2,
    }


def row_fit(results: dict) -> dict:
    """Bytes per gathered row = a + b * ids, from the gather package's carry arm at the shortest and longest L
    (all processes and seeds pooled per L)."""
    per_length = {}
    for (name, _, length), per_seed in results.items():
        if name != "gather":
            continue
        pooled = per_length.setdefault(length, {"rows": 0, "bytes": 0, "ids": 0, "logprobs": 0})
        for summary in per_seed.values():
            for key in pooled:
                pooled[key] += summary[ARM]["gathered_rows"][key]
    short, long = min(per_length), max(per_length)
    points = {length: (v["ids"] / v["rows"], v["bytes"] / v["rows"]) for length, v in per_length.items()}
    (x0, y0), (x1, y1) = points[short], points[long]
    slope = (y1 - y0) / (x1 - x0)
    return {"points": points, "per_id": slope, "fixed": y0 - slope * x0, "logprobs": per_length[long]["logprobs"]}


def serialization_seconds(ids: list[int], rows_per_process: int, with_logprobs: bool, repeats: int = 3) -> dict:
    """What `all_gather_object` does on each process with the gathered rows: pickle its own share, unpickle every
    process's (the same share stands for each); the best of `repeats`."""
    rng = random.Random(1)
    logprobs = [-rng.expovariate(1.0) for _ in range(COMPLETION_TOKENS)] if with_logprobs else None
    half = IDS_PER_ROW // 2
    share = [
        GatheredRow(
            {"prompt": f"{i:05d}" + "x" * 195}, list(ids[:half]), list(ids[half:]), None,
            list(logprobs) if logprobs else None,
        )
        for i in range(rows_per_process)
    ]
    best_dump = best_load = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        payload = pickle.dumps(share)
        dumped = time.perf_counter()
        for _ in range(PROCESSES):
            pickle.loads(payload)
        loaded = time.perf_counter()
        best_dump, best_load = min(best_dump, dumped - began), min(best_load, loaded - dumped)
    return {"rows": rows_per_process, "share_bytes": len(payload), "pickle_s": best_dump, "unpickle_all_s": best_load,
            "load": os.getloadavg()[0]}  # fmt: skip


def side_by_side(saved: dict, results: dict) -> list[str]:
    lines = [
        "",
        f"## `{ARM}`: gather (9f9d3f7) against exchange (main), side by side",
        "",
        "Same run, same seeds, packages alternating per seed. Bytes: received per process per optimizer step through "
        "Python-level collectives (mean over processes). Seconds: wall time per optimizer step, steps 2..12, mean over "
        "processes. Mean over seeds [95% t-interval]; ratios taken per seed. Load: the 1-minute load average before "
        "and after each torchrun of the setting (min - max); the times were taken under that load, under `nice`, on "
        "2 cores (4 processes oversubscribe them).",
        "",
        "| processes | L | gather kB / step | exchange kB / step | gather / exchange | gather s / step "
        "| exchange s / step | gather / exchange (time) | load average |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for processes, length in sorted({(p, l) for _, p, l in results}):
        gather, exchange = results["gather", processes, length], results["exchange", processes, length]
        seeds = sorted(set(gather) & set(exchange))

        def figure(per_seed, key, scale=1.0, seeds=seeds):
            return t_interval([per_seed[s][ARM][key] * scale for s in seeds])

        bytes_ratio = t_interval([gather[s][ARM]["bytes_per_step"] / exchange[s][ARM]["bytes_per_step"] for s in seeds])
        time_ratio = t_interval(
            [gather[s][ARM]["seconds_per_step"] / exchange[s][ARM]["seconds_per_step"] for s in seeds]
        )
        loads = [
            value
            for name in ("gather", "exchange")
            for s in seeds
            for value in (saved["runs"][f"{name}/{processes}/{length}/{s}"]["load"]["before"][0],
                          saved["runs"][f"{name}/{processes}/{length}/{s}"]["load"]["after"][0])
        ]  # fmt: skip
        lines.append(
            f"| {processes} | {length} | {figure(gather, 'bytes_per_step', 1e-3).text(1)} | "
            f"{figure(exchange, 'bytes_per_step', 1e-3).text(1)} | {bytes_ratio.text(2)} | "
            f"{figure(gather, 'seconds_per_step').text(3)} | {figure(exchange, 'seconds_per_step').text(3)} | "
            f"{time_ratio.text(2)} | {min(loads):.2f} - {max(loads):.2f} |"
        )
    return lines


def projection(results: dict, fit: dict, costs: dict, simulated: dict, serialization: list[dict]) -> list[str]:
    means = {key: mean_summary(per_seed) for key, per_seed in results.items()}
    most = max(p for _, p, _ in results)
    long = max(l for _, _, l in results)
    generated_per_trained = means["gather", most, long][ARM]["generated_rows_per_step"] / PER_DEVICE_BATCH
    # The exchange's decision, bounded above: all its bytes beyond `GRPOTrainer`, moved rows included, per other
    # process (the moved rows are counted again below, at the projected size).
    exchange = means["exchange", most, long]
    decision = (exchange[ARM]["bytes_per_step"] - exchange["GRPOTrainer"]["bytes_per_step"]) / (most - 1)
    rows_per_process = TRAINED_ROWS // PROCESSES
    all_reduce = {name: 2 * (PROCESSES - 1) / PROCESSES * params * BF16 for name, params in MODELS.items()}
    smollm2 = costs["SmolLM2 ids of text (vocabulary 49,152)"]
    large = costs["ids at or above 65,536 (e.g. Qwen2.5's 151,646-token vocabulary)"]
    logprob = costs["log-prob (Python float)"]
    lines = [
        "",
        f"## Projection: {PROCESSES} GPUs x {TRAINED_ROWS} trained rows per step x {IDS_PER_ROW} token ids per row",
        "",
        "Inputs, each measured (this machine unless named):",
        "",
        f"- gathered row payload from the live run (gather package, `{ARM}`, all processes and seeds pooled): "
        + ", ".join(f"L = {l}: {b:.1f} bytes for {i:.1f} ids per row" for l, (i, b) in sorted(fit["points"].items()))
        + f"; fit: a = {fit['fixed']:.1f} bytes per row + b = {fit['per_id']:.3f} bytes per id (the toy vocabulary's "
        f"ids are all below 256); log-probs sent in the run: {fit['logprobs']} (the plain-`generate` path fills none);",
        "- bytes pickle writes per element (`pickle.dumps` of a 4096-long list): "
        + "; ".join(f"{name}: {value:.3f}" for name, value in costs.items() if name != "smollm2_ids")
        + ";",
        f"- generated rows per trained row, R: {generated_per_trained:.2f} (the live run, gather package, `{ARM}`, "
        f"{most} processes, L = {long}; both packages generate alike); 4 is shown as a harder pass rate;",
        f"- the exchange's decision: k = {decision:.0f} bytes per other process and step, an upper bound (the live run "
        f"at {most} processes, L = {long}, exchange package: all its bytes beyond `GRPOTrainer`, its moved toy rows "
        "included, over the other processes);",
        f"- rows the exchange moves per process and step at {PROCESSES} processes x {rows_per_process} rows, groups of "
        "4, carrying on (`exchange_simulation.simulate`, the package's own plan, 10 runs x 50 steps): "
        + "; ".join(f"q = {q}: {interval.text(2)}" for q, interval in simulated.items())
        + f"; the projection takes the largest, and m = 1 (all {rows_per_process} trained rows move) as the bound. "
        "Moved carried rows also carry their generating log-probs (float32, 4 bytes per completion token), "
        "counted on every moved row.",
        "",
        f"Gather: (P - 1) / P x R x {TRAINED_ROWS} x row bytes. Exchange: (P - 1) x k + moved rows x (row bytes + "
        f"4 x {COMPLETION_TOKENS}). Row bytes = a + b' x {IDS_PER_ROW} (+ {COMPLETION_TOKENS} log-probs on the vLLM "
        f"path), b' the bytes per real id. All-reduce per process: 2 (P - 1) / P x parameters x 2 bytes = "
        + ", ".join(f"{name}: {value / 1e9:.2f} GB" for name, value in all_reduce.items())
        + ".",
        "",
        "| bytes per id | log-probs sent | R | row (kB) | gather (MB / step / process) | exchange (MB) "
        "| exchange, m = 1 (MB) | saving (MB) | saving / 1.5B all-reduce | saving / 7B all-reduce |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    moved = max(interval.mean for interval in simulated.values())
    rows, worst_gather = [], 0.0
    for id_name, per_id in (("SmolLM2 text", smollm2), ("id >= 65,536", large)):
        for with_logprobs in (False, True):
            for rounds in (generated_per_trained, 4.0):
                row_bytes = fit["fixed"] + per_id * IDS_PER_ROW + (logprob * COMPLETION_TOKENS if with_logprobs else 0)
                gather = (PROCESSES - 1) / PROCESSES * rounds * TRAINED_ROWS * row_bytes
                moved_row = row_bytes + 4 * COMPLETION_TOKENS
                after = (PROCESSES - 1) * decision + moved * moved_row
                worst = (PROCESSES - 1) * decision + rows_per_process * moved_row
                saving = gather - after
                rows.append(saving)
                worst_gather = max(worst_gather, gather)
                lines.append(
                    f"| {per_id:.2f} ({id_name}) | {'yes (vLLM)' if with_logprobs else 'no'} | {rounds:.2f} | "
                    f"{row_bytes / 1e3:.1f} | {gather / 1e6:.1f} | {after / 1e6:.2f} | {worst / 1e6:.2f} | "
                    f"{saving / 1e6:.1f} | {saving / all_reduce['1.5B']:.1%} | {saving / all_reduce['7B']:.1%} |"
                )
    lines += [
        "",
        f"Largest saving in the table: {max(rows) / 1e6:.0f} MB per process per step, "
        f"{max(rows) / all_reduce['1.5B']:.1%} of the 1.5B model's all-reduce bytes, "
        f"{max(rows) / all_reduce['7B']:.1%} of the 7B model's. The rule of the method: it matters above "
        f"{MATTERS:.0%} of the 1.5B model's ({MATTERS * all_reduce['1.5B'] / 1e6:.0f} MB).",
        "",
        f"Read as 1k rows per GPU instead ({TRAINED_ROWS * PROCESSES} trained rows per step), the gather's bytes grow "
        f"{PROCESSES}-fold: the table's largest gather becomes {worst_gather * PROCESSES / 1e6:.0f} MB per process, "
        f"{worst_gather * PROCESSES / all_reduce['1.5B']:.0%} of the 1.5B model's all-reduce and "
        f"{worst_gather * PROCESSES / all_reduce['7B']:.0%} of the 7B model's (the saving is that less the "
        "exchange's, which grows with the rows per process as well).",
        "",
        "Serialization on this machine's CPU (one core, the best of 3): pickling one process's share of the gathered "
        f"rows and unpickling all {PROCESSES} shares, as `all_gather_object` does on every process, at R = "
        f"{generated_per_trained:.2f} ({serialization[0]['rows']} rows per process, SmolLM2 ids):",
        "",
        "| log-probs sent | share (MB) | pickle (s) | unpickle all 8 (s) | 1-minute load average after |",
        "|---|---|---|---|---|",
    ]
    for entry in serialization:
        lines.append(
            f"| {'yes' if entry['with_logprobs'] else 'no'} | {entry['share_bytes'] / 1e6:.1f} | "
            f"{entry['pickle_s']:.2f} | {entry['unpickle_all_s']:.2f} | {entry['load']:.2f} |"
        )
    return lines, {"largest": max(rows) / all_reduce["1.5B"], "per_gpu": worst_gather * PROCESSES / all_reduce["1.5B"],
                   "unpickle": [entry["unpickle_all_s"] for entry in serialization]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, default=RESULTS / "exchange_vs_gather.json")
    args = parser.parse_args()
    saved, results = load_runs(args.input)
    costs = id_costs()
    fit = row_fit(results)
    simulated = {q: simulate(PROCESSES, TRAINED_ROWS // PROCESSES, q, True, runs=10, steps=50)[0] for q in (0.3, 0.5)}
    means = mean_summary(results["gather", max(p for _, p, _ in results), max(l for _, _, l in results)])
    rows = round(means[ARM]["generated_rows_per_step"] / PER_DEVICE_BATCH * TRAINED_ROWS / PROCESSES)
    serialization = [
        {**serialization_seconds(costs["smollm2_ids"], rows, with_logprobs), "with_logprobs": with_logprobs}
        for with_logprobs in (False, True)
    ]
    lines, shares = projection(results, fit, costs, simulated, serialization)
    text = report(results, saved["machine"], saved["steps"]).replace(
        "# Collective traffic and generated rows held per process",
        "# The row exchange against gathering every round's rows\n\n"
        f"Packages: {', '.join(f'`{name}` = {path}' for name, path in saved['packages'].items())}. Method: "
        "[`exchange_vs_gather_method.md`](exchange_vs_gather_method.md). Live run's machine below; the projection's "
        f"measurements (pickle sizes and times, simulation) on: {describe_machine()}.\n\n"
        "## All arms",
        1,
    )
    text += "\n".join(side_by_side(saved, results) + lines) + "\n"
    verdict = "matters" if shares["largest"] > MATTERS else "does not matter"
    text += (
        f"\n## Verdict\n\nBy the method's rule the exchange's saving {verdict} at {PROCESSES} GPUs x {TRAINED_ROWS} rows "
        f"x {IDS_PER_ROW} tokens: at most {shares['largest']:.1%} of the 1.5B model's gradient all-reduce bytes per "
        f"step. Read as 1k rows per GPU, the gather alone reaches {shares['per_gpu']:.0%} of it in the worst row "
        f"(above the rule's {MATTERS:.0%}). Beside the bytes, the gather design costs each process "
        f"{shares['unpickle'][0]:.2f} to {shares['unpickle'][1]:.2f} s of CPU per step to unpickle every process's "
        "rows at 1k rows (this machine, under the load the table gives), growing with the rows; the step time "
        "at that scale is not measured here. On the CPU run the packages' step times do not differ detectably.\n"
    )
    output = args.input.with_suffix(".md")
    output.write_text(text)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
