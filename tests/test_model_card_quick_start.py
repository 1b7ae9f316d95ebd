"""The model card's quick start runs on the model as saved: plain-text generation when the tokenizer has no chat
template (TRL's snippet sends chat messages and fails there), TRL's chat snippet when it has one."""

import contextlib
import io
import re

import pytest

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from .helpers import toy_config, toy_trainer

# A minimal template that renders each message's content, enough for the toy tokenizer.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def trained_card(trainer) -> str:
    """Trains, saves the model and writes its card as the command line does; returns the card."""
    trainer.train()
    trainer.save_model(trainer.args.output_dir)
    trainer.create_model_card()
    with open(f"{trainer.args.output_dir}/README.md", encoding="utf-8") as card:
        return card.read()


def quick_start_code(card: str) -> str:
    match = re.search(r"## Quick start\n\n```python\n(.*?)```", card, re.DOTALL)
    assert match, card
    return match.group(1)


def run_snippet(code: str, cwd, monkeypatch) -> str:
    monkeypatch.chdir(cwd)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "quick_start", "exec"), {"__name__": "__quick_start__"})
    return printed.getvalue()


@pytest.mark.parametrize(
    ("config_class", "trainer_class"), [(DAPOConfig, DAPOTrainer), (DrGRPOConfig, DrGRPOTrainer)]
)
def test_quick_start_generates_plain_text_without_a_chat_template(
    config_class, trainer_class, toy_task, tmp_path, monkeypatch
):
    assert not toy_task.tokenizer.chat_template
    trainer = toy_trainer(trainer_class, toy_config(config_class, tmp_path / "model", max_steps=1), toy_task)
    code = quick_start_code(trained_card(trainer))
    first_prompt = toy_task.train_dataset[0]["prompt"]
    assert f"prompt = {first_prompt!r}" in code and "role" not in code
    assert f'model="{tmp_path / "model"}"' in code
    printed = run_snippet(code, tmp_path, monkeypatch)
    assert printed.endswith("\n")  # the snippet printed the generated text


def test_quick_start_keeps_chat_messages_with_a_chat_template(toy_task, tmp_path, monkeypatch):
    toy_task.tokenizer.chat_template = CHAT_TEMPLATE
    trainer = toy_trainer(DAPOTrainer, toy_config(DAPOConfig, tmp_path / "model", max_steps=1), toy_task)
    code = quick_start_code(trained_card(trainer))
    assert '[{"role": "user", "content": question}]' in code
    run_snippet(code, tmp_path, monkeypatch)
