"""Model-card content shared by the variant trainers: tags, paper citations and a table of key settings."""

import os
import re
import textwrap
from pathlib import Path

TRL_VARIANTS_TAG = "trl-variants"
# trl-variants is not published on a package index yet: the card says how to install it from its repository.
INSTALL_NOTE = "To use it, install trl-variants from a clone of its repository with `pip install .`."

DAPO_PAPER = {
    "title": "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    "id": "2503.14476",
    "citation": textwrap.dedent("""\
        @article{yu2025dapo,
            title        = {{DAPO: An Open-Source LLM Reinforcement Learning System at Scale}},
            author       = {Qiying Yu and Zheng Zhang and Ruofei Zhu and Yufeng Yuan and Xiaochen Zuo and Yu Yue and others},
            year         = 2025,
            eprint       = {arXiv:2503.14476},
        }"""),
}

DR_GRPO_PAPER = {
    "title": "Understanding R1-Zero-Like Training: A Critical Perspective",
    "id": "2503.20783",
    "citation": textwrap.dedent("""\
        @article{liu2025understanding,
            title        = {{Understanding R1-Zero-Like Training: A Critical Perspective}},
            author       = {Zichen Liu and Changyu Chen and Wenjun Li and Penghui Qi and Tianyu Pang and Chao Du and Wee Sun Lee and Min Lin},
            year         = 2025,
            eprint       = {arXiv:2503.20783},
        }"""),
}


def settings_section(variant_name: str, settings: dict[str, object], steps: int) -> str:
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in settings.items())
    return (
        f"### {variant_name} settings\n\n"
        f"Trained with trl-variants `{variant_name}` for {steps} optimizer step{'s' if steps != 1 else ''}. "
        f"{INSTALL_NOTE}\n\n"
        "| setting | value |\n|---|---|\n"
        f"{rows}\n\n"
    )


TRAINING_PROCEDURE = re.compile(r"(## Training procedure\n)(.*?)(### Framework versions\n)", re.DOTALL)


def with_training_procedure(text: str, settings: str) -> str:
    """The card with `settings` in TRL's "Training procedure" section, whose experiment-tracker badge lines are
    left blank when no tracker was used (the section otherwise holds one sentence), without those blank lines."""
    match = TRAINING_PROCEDURE.search(text)
    if match is None:  # another TRL template: the settings still reach the card, at its end
        return text.rstrip("\n") + "\n\n" + settings.replace("### ", "## ", 1)
    kept = [line for line in match.group(2).split("\n") if line.strip()]
    body = "\n\n".join(kept)
    return text[: match.start(2)] + f"\n{body}\n\n{settings}" + text[match.start(3) :]


def is_hub_dataset_id(name: str | None) -> bool:
    """Whether `name` can be a Hub dataset id, so that the card may link it: not a local path, and well formed."""
    if not name or os.path.exists(name) or name.startswith((".", "/", "~")) or name.count("/") > 1:
        return False
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def base_model_text(name_or_path: str | None) -> str | None:
    """How the card names a base model that is not on the Hub: TRL writes `[None](https://huggingface.co/None)`."""
    if name_or_path and os.path.isdir(name_or_path):
        return f"the local model `{name_or_path}`"
    if not name_or_path:
        return "a model built locally from a config (it has no base model on the Hub)"
    return None


def tidy_card_text(text: str, base_model: str | None, local_dataset: str | None, model_reference: str) -> str:
    """TRL's card text without links to `None` or to a dataset that is not on the Hub.

    `base_model` replaces the `[None](https://huggingface.co/None)` link; `local_dataset` (a path or a name that is
    no Hub id) is named after it without a link; `model_reference` replaces `model="None"` in the quick start.
    """
    if base_model is not None:
        text = text.replace("[None](https://huggingface.co/None)", base_model)
    if local_dataset:
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if line.startswith("This model is a fine-tuned version of") and line.endswith("."):
                lines[index] = f"{line[:-1]}, on the dataset `{local_dataset}` (not on the Hub)."
        text = "\n".join(lines)
    return text.replace('model="None"', f"model={model_reference!r}".replace("'", '"'))


QUICK_START_CODE = re.compile(r"(## Quick start\n\n```python\n)(.*?)(```)", re.DOTALL)


def plain_text_quick_start(text: str, prompt: str, max_new_tokens: int) -> str:
    """The card with TRL's quick start, which sends chat messages, rewritten to generate from a plain-text prompt.

    TRL's snippet fails with "Cannot use chat template functions" on a model whose tokenizer has no chat template,
    as most base models and models trained on plain-text prompts have.
    """
    match = QUICK_START_CODE.search(text)
    if match is None:
        return text
    model_line = next((line for line in match.group(2).splitlines() if "pipeline(" in line), None)
    if model_line is None:
        return text
    code = (
        "from transformers import pipeline\n\n"
        "# The tokenizer has no chat template: the model continues plain text, as it was trained to.\n"
        f"prompt = {prompt!r}\n"
        f"{model_line}\n"
        f"output = generator(prompt, max_new_tokens={max_new_tokens}, return_full_text=False)[0]\n"
        'print(output["generated_text"])\n'
    )
    return text[: match.start(2)] + code + text[match.end(2) :]


def example_prompt(trainer) -> str:
    """A plain-text prompt of the kind the model was trained on: the first training prompt when it is text."""
    dataset = getattr(trainer, "train_dataset", None)
    try:
        prompt = next(iter(dataset))["prompt"] if dataset is not None else None
    except (StopIteration, KeyError, TypeError):
        prompt = None
    return prompt if isinstance(prompt, str) and prompt else "The answer to 12 + 30 is"


def tidy_model_card(trainer, dataset_name: str | None, model_name: str | None = None) -> None:
    """Rewrites the README.md `trainer.create_model_card` wrote in `output_dir` (see `tidy_card_text`); when the
    tokenizer has no chat template, the quick start generates from plain text (see `plain_text_quick_start`)."""
    if not trainer.is_world_process_zero():
        return
    card = Path(trainer.args.output_dir, "README.md")
    text = card.read_text(encoding="utf-8")
    name_or_path = getattr(trainer.model.config, "_name_or_path", None)
    local_dataset = None if is_hub_dataset_id(dataset_name) else dataset_name
    reference = trainer.hub_model_id or model_name or str(trainer.args.output_dir)
    text = tidy_card_text(text, base_model_text(name_or_path), local_dataset, reference)
    if not getattr(trainer.processing_class, "chat_template", None):
        text = plain_text_quick_start(text, example_prompt(trainer), trainer.args.max_completion_length or 128)
    card.write_text(text, encoding="utf-8")


class VariantModelCardMixin:
    """Adds the variant's key settings to the "Training procedure" section of the model card TRL writes (tags and
    citation come from `_paper`, `_name` and `_tag_names`, which TRL's own model card already uses), and names a
    base model or dataset that is not on the Hub without a link."""

    def _variant_settings(self) -> dict[str, object]:
        raise NotImplementedError

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        # A dataset that is no Hub id would be linked, and listed in the card's metadata, as if it were one.
        hub_dataset = dataset_name if is_hub_dataset_id(dataset_name) else None
        # TRL titles the card "Model Card for None" without a name; the output folder's name is the model's.
        title = model_name or os.path.basename(os.path.normpath(self.args.output_dir))
        super().create_model_card(model_name=title, dataset_name=hub_dataset, tags=tags)
        if not self.is_world_process_zero():
            return
        tidy_model_card(self, dataset_name, model_name)
        card = Path(self.args.output_dir, "README.md")
        settings = settings_section(self._name, self._variant_settings(), self.state.global_step)
        card.write_text(with_training_procedure(card.read_text(encoding="utf-8"), settings), encoding="utf-8")
