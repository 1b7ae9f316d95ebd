"""Trains the toy task's default warm-started policy and writes it into the package, where `make_toy_task(seed=0)`
loads it (trl_variants/toy/policy.py). Run it after changing the toy model, its tokenizer, its data or its warm
start: `python scripts/build_toy_policy.py`. A test retrains the policy and compares."""

import torch

from trl_variants.toy.policy import SHIPPED_POLICY_FILE, policy_metadata, save_policy, train_shipped_policy


def main() -> None:
    torch.set_num_threads(1)  # the model is tiny; more threads only contend
    save_policy(train_shipped_policy(), SHIPPED_POLICY_FILE)
    trained_on = {key: policy_metadata()[key] for key in ("cpu", "kernels", "torch")}
    print(f"Wrote {SHIPPED_POLICY_FILE} ({SHIPPED_POLICY_FILE.stat().st_size // 1024} KB), trained on {trained_on}.")


if __name__ == "__main__":
    main()
