"""examples/real_model_demo.py with a tiny chat model built from a config in the real model's place (see
tests/tiny_chat_model.py): `python real_model_demo_on_a_tiny_model.py [flags]`, as a process of its own that a
test can interrupt with a real SIGINT."""

import sys

from tests.helpers import load_example
from tests.tiny_chat_model import use_tiny_chat_model

if __name__ == "__main__":
    example = load_example("real_model_demo")
    use_tiny_chat_model(example, setattr)
    sys.exit(example.main(sys.argv[1:]))
