#!/usr/bin/env bash
# Multi-GPU and multi-node training with the accelerate configs bundled with TRL.
#
# `--accelerate_config NAME` picks one of TRL's files (zero1, zero2, zero3, fsdp1, fsdp2, multi_gpu, single_gpu) or
# takes a path to your own; any other `accelerate launch` flag is passed through. trl-variants then starts one
# process per GPU, each running the training command. Choose one of the commands below.
set -euo pipefail

case "${1:-}" in
  ddp)
    # One node, 8 GPUs, plain data parallelism: enough for 1.5B models.
    trl-variants dapo --config examples/recipes/dapo_qwen2.5_7b.yaml --model_name_or_path Qwen/Qwen2.5-1.5B \
      --accelerate_config multi_gpu --num_processes 8
    ;;
  zero3)
    # One node, 8 GPUs, DeepSpeed ZeRO-3 sharding parameters, gradients and optimizer state.
    trl-variants dapo --config examples/recipes/dapo_qwen2.5_7b.yaml --accelerate_config zero3 --num_processes 8
    ;;
  fsdp)
    # One node, 8 GPUs, PyTorch FSDP2.
    trl-variants dr-grpo --config examples/recipes/dr_grpo_qwen2.5_math_7b.yaml --accelerate_config fsdp2 \
      --num_processes 8
    ;;
  multinode)
    # Two nodes of 8 GPUs: run this on both, with NODE_RANK=0 on the first and NODE_RANK=1 on the second, and
    # MAIN_ADDR set to the first node's address.
    trl-variants dapo --config examples/recipes/dapo_qwen2.5_7b.yaml --accelerate_config zero3 \
      --num_processes 16 --num_machines 2 --machine_rank "${NODE_RANK:-0}" \
      --main_process_ip "${MAIN_ADDR:-127.0.0.1}" --main_process_port 29500
    ;;
  script)
    # Your own Python script (here the swap example) under accelerate with TRL's ZeRO-2 file.
    accelerate launch --config_file "$(python -c 'import importlib.resources as r; print(r.files("trl.accelerate_configs") / "zero2.yaml")')" \
      --num_processes 8 examples/swap_from_grpo.py
    ;;
  *)
    echo "usage: $0 ddp|zero3|fsdp|multinode|script" >&2
    exit 2
    ;;
esac
