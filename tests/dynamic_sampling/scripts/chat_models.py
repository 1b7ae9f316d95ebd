"""Tiny chat models built locally, for tool calling, environments and vision-language models without a hub.

- `build_chat_tokenizer`: one token per printable character plus the chat and tool markers as added tokens, with
  TRL's Qwen2.5 chat template, which TRL's tool parser (`add_response_schema`) knows.
- `tool_call_task`: a tiny Qwen2 policy with that tokenizer, conversational `a+b=` prompts and a `multiply` tool.
  `tool_call_bias` gives generation a `sequence_bias` (a `generation_kwargs` entry) that makes `<tool_call>` and
  the end-of-turn token likely and, once a call is opened, completes it as one of two calls (one valid, one with a
  wrong argument name); so a random policy calls the tool in some completions and not in others, while TRL's own
  parser and tool loop do the work. Training log-probs see the unbiased policy, as with any sampling setting.
- `CountingEnvironment` and `make_episode_reward`: an environment whose `reset` starts a numbered episode and whose
  `multiply` is a tool, and a reward that records which episode it scored and whether the prompt shows its
  observation.
- `llava_task`: a tiny LLaVA (CLIP vision tower, Qwen2 language model) with a locally built image processor and
  processor; each prompt comes with an image whose colour encodes its first operand.
"""

import string

import torch
from datasets import Dataset
from PIL import Image
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from trl.chat_template_utils import qwen2_5_chat_template

MARKERS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
GOOD_CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
BAD_CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 3, "c": 4}}\n</tool_call>'
IMAGE_TOKEN = "<image>"
# LLaVA's image placeholder expands to this many tokens: (28 / 14) ** 2 patches, the CLS feature dropped.
IMAGE_SIZE, PATCH_SIZE = 28, 14


def build_chat_tokenizer(extra_tokens=()) -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<unk>": 1}
    for char in string.printable:
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_tokens([AddedToken(token, normalized=False, special=False) for token in (*MARKERS, *extra_tokens)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<|im_end|>", unk_token="<unk>", padding_side="left"
    )
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def tiny_qwen2(vocab_size: int, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=True,
    )  # fmt: skip
    return Qwen2ForCausalLM(config)


def operand_prompts(count: int) -> list[str]:
    return [f"{a}+{b}=" for b in range(10) for a in range(10)][:count]


def tool_call_bias(tokenizer) -> list:
    """`sequence_bias` entries: open a call or end the turn often; once opened, complete one of the two calls."""
    bias = {(tokenizer.convert_tokens_to_ids("<tool_call>"),): 3.0, (tokenizer.eos_token_id,): 4.0}
    for call in (GOOD_CALL, BAD_CALL):
        ids = tokenizer(call, add_special_tokens=False)["input_ids"]
        # The turn ends right after the call, so that TRL's parser reads it as a tool call.
        ids = [*ids, tokenizer.eos_token_id]
        for end in range(2, len(ids) + 1):
            bias[tuple(ids[:end])] = 40.0
    return [[list(sequence), value] for sequence, value in bias.items()]


def tool_call_task(seed: int = 0, num_prompts: int = 40):
    tokenizer = build_chat_tokenizer()
    model = tiny_qwen2(len(tokenizer), seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    prompts = [[{"role": "user", "content": prompt}] for prompt in operand_prompts(num_prompts)]
    return model, tokenizer, Dataset.from_dict({"prompt": prompts}), tool_call_bias(tokenizer)


class CountingEnvironment:
    """Each `reset` starts a new episode and returns its observation; `multiply` is the environment's tool."""

    log: list[dict] = []

    def reset(self, **kwargs):
        self.episode = len(CountingEnvironment.log)
        self.tool_calls = 0
        CountingEnvironment.log.append({"episode": self.episode, "prompt": kwargs["prompt"][-1]["content"]})
        return f" [episode {self.episode}]"

    def multiply(self, a: int, b: int) -> int:
        """
        Multiplies two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The product of a and b.
        """
        self.tool_calls += 1
        return a * b


def make_episode_reward(scored: list[dict]):
    def episode_reward(prompts, completions, environments, **kwargs):
        rewards = []
        for prompt, environment in zip(prompts, environments, strict=True):
            scored.append({
                "episode": environment.episode,
                "sees_observation": prompt[-1]["content"].endswith(f" [episode {environment.episode}]"),
            })  # fmt: skip
            rewards.append(float(environment.tool_calls > 0))
        return rewards

    return episode_reward


def prompt_image(prompt_text: str) -> Image.Image:
    """An image whose red channel encodes the prompt's first operand."""
    return Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (20 * int(prompt_text.split("+")[0]), 100, 50))


VLM_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'image' %}{{- '<image>' }}{%- elif part.type == 'text' %}{{- part.text }}{%- endif %}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def llava_task(seed: int = 0, num_prompts: int = 40):
    tokenizer = build_chat_tokenizer(extra_tokens=(IMAGE_TOKEN,))
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default", chat_template=VLM_TEMPLATE, image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
    )  # fmt: skip
    torch.manual_seed(seed)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=IMAGE_SIZE,
            patch_size=PATCH_SIZE,
        ),
        text_config=Qwen2Config(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=512,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN), vision_feature_select_strategy="default",
        vision_feature_layer=-1, projector_hidden_act="gelu",
    )  # fmt: skip
    model = LlavaForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    texts = operand_prompts(num_prompts)
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": text}] for text in texts], "image": [prompt_image(t) for t in texts]}
    )
    return model, processor, dataset
