"""The benchmarks, one folder per study (benchmarks/README.md lists them). Run a study's script from the repository
root as a module, `python -m benchmarks.<study>.<script>`, so that it imports `benchmarks.shared` by name.

Every benchmark runs offline: the defaults below are set before any study imports the Hugging Face libraries."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
