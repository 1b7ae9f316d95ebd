"""`trl-variants real-demo` with a tiny chat model built from a config in the real model's place (see
tests/tiny_chat_model.py): `python real_demo_on_a_tiny_model.py [real-demo flags]`, as a process of its own that a
test can interrupt with SIGINT like a user's Ctrl-C."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.tiny_chat_model import use_tiny_chat_model  # noqa: E402
from trl_variants.cli.main import main  # noqa: E402

if __name__ == "__main__":
    use_tiny_chat_model(setattr)
    sys.exit(main(["real-demo", *sys.argv[1:]]))
