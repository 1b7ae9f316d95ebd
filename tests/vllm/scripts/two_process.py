"""Runs `DAPOTrainer` with dynamic sampling and carrying, generating with vLLM colocate, in each process of a
torchrun launch (each process runs its own engine), and records what passes between each rank and its engine.

    ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 tests/vllm/scripts/two_process.py --out DIR

Each rank writes `DIR/vllm_rank<r>.json`; tests/vllm/test_multiprocess.py compares the ranks.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.vllm.cpu_backend import use_cpu_backend_defaults  # noqa: E402

use_cpu_backend_defaults()

from tests.dynamic_sampling.scripts.rewards import HalfDegenerateReward, is_live_prompt  # noqa: E402
from tests.vllm.helpers import VLLMRecorder, loss_rows, vllm_config, vllm_trainer  # noqa: E402
from trl_variants import DAPOConfig, DAPOTrainer  # noqa: E402
from trl_variants.toy import make_toy_task  # noqa: E402

G = 4
PER_DEVICE_BATCH = 8  # two processes: 16 rows, 4 groups per step
STEPS = 3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = Path(parser.parse_args().out)
    rank = int(os.environ["RANK"])
    task = make_toy_task(seed=0, num_attention_heads=2)
    # Each rank saves the same policy into a folder of its own, for its own engine to load.
    folder = out / f"policy_rank{rank}"
    task.model.save_pretrained(folder)
    task.tokenizer.save_pretrained(folder)
    config = vllm_config(
        DAPOConfig,
        out / "train",
        per_device_train_batch_size=PER_DEVICE_BATCH,
        max_steps=STEPS,
        dynamic_sampling_carry_surplus=True,
        vllm_importance_sampling_mode="token_truncate",
    )
    trainer = vllm_trainer(DAPOTrainer, config, task, folder, reward_funcs=[HalfDegenerateReward(G)])
    recorder = VLLMRecorder(trainer)
    trainer.train()
    tokenizer = trainer.processing_class
    keys = ("dynamic_sampling/", "sampling/")
    record = {
        "global_step": trainer.state.global_step,
        "logs": [
            {k: v for k, v in entry.items() if k.startswith(keys)}
            for entry in trainer.state.log_history
            if "dynamic_sampling/rounds" in entry
        ],
        "calls": [{"step": call.step, "rows": len(call.prompt_ids)} for call in recorder.generate_calls],
        "syncs": recorder.syncs,
        "sampled": [[p, c, lp] for (p, c), rows in recorder.sampled().items() for lp in rows],
        "trained": [
            {
                "step": inputs["step"],
                "live": is_live_prompt(tokenizer.decode(prompt, skip_special_tokens=True)),
                "prompt": prompt,
                "completion": completion,
                "sampling": inputs["sampling_per_token_logps"][i, : len(completion)].tolist(),
            }
            for inputs in recorder.loss_inputs
            for prompt, completion, i in loss_rows(inputs)
        ],
    }
    (out / f"vllm_rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
