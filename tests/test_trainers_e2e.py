"""End to end on the toy task: both trainers train, save a checkpoint with a model card, reload, work with LoRA,
and replace GRPOTrainer in an unchanged training script."""

import copy
import os
import re

import pytest
import torch
import transformers.training_args
from peft import LoraConfig, PeftModel
from transformers import AutoModelForCausalLM
from trl import GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from .helpers import toy_config, toy_trainer
from .ref_setup import fresh_toy_task

# A short warm start gives the policy some skill, so that groups get differing rewards and the weights move
# (dynamic sampling would otherwise only find all-wrong groups, whose zero advantages leave the weights alone).
WARM_START_STEPS = 40

VARIANTS = {
    "dapo": (DAPOTrainer, DAPOConfig, "DAPO", "2503.14476"),
    "dr-grpo": (DrGRPOTrainer, DrGRPOConfig, "Dr. GRPO", "2503.20783"),
}


def parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before: dict, after: dict) -> list[str]:
    return [name for name in before if not torch.equal(before[name], after[name])]


def read_card(output_dir) -> str:
    with open(os.path.join(output_dir, "README.md"), encoding="utf-8") as card:
        return card.read()


def empty_sections(card: str) -> list[str]:
    """Headings with nothing under them before the next heading, and runs of blank lines (what TRL's template
    leaves of its experiment-tracker badges when no tracker was used)."""
    problems, heading, body, in_code = [], None, [], False
    for line in [*card.split("\n"), "# end"]:
        in_code ^= line.startswith("```")
        if line.startswith("#") and not in_code:
            if heading is not None and not "".join(body).strip() and not line.startswith(heading.split(" ")[0] + "#"):
                problems.append(f"empty section {heading!r}")
            heading, body = line, []
        else:
            body.append(line)
    if re.search(r"\n[ \t]*\n[ \t]*\n[ \t]*\n", card):
        problems.append("a run of blank lines")
    return problems


def card_tags(card: str) -> set[str]:
    """The `tags:` list of the card's YAML front matter."""
    front_matter = card.split("---")[1]
    lines = front_matter.splitlines()
    start = lines.index("tags:")
    tags = set()
    for line in lines[start + 1 :]:
        if not line.startswith("- "):
            break
        tags.add(line[2:].strip())
    return tags


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.slow
def test_trains_saves_a_checkpoint_and_model_card_and_reloads(variant, tmp_path):
    trainer_class, config_class, display_name, arxiv_id = VARIANTS[variant]
    task = fresh_toy_task(WARM_START_STEPS)
    before = parameters(task.model)
    config = toy_config(config_class, tmp_path, max_steps=2, save_strategy="steps", save_steps=2)
    trainer = toy_trainer(trainer_class, config, task)
    trainer.train()

    assert trainer.state.global_step == 2
    after = parameters(trainer.model)
    assert changed(before, after), "training moved no parameter"

    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "config.json").is_file()
    if variant == "dapo":
        assert (checkpoint / "dynamic_sampling_state.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert not changed(after, parameters(reloaded))

    card = read_card(tmp_path)
    assert {"trl", "trl-variants", variant} <= card_tags(card)
    assert f"arXiv:{arxiv_id}" in card and f"papers/{arxiv_id}" in card
    assert f"### {display_name} settings" in card.split("## Training procedure\n", 1)[1].split("\n## ", 1)[0]
    assert not empty_sections(card), card
    assert f"| `loss_type` | `{config.loss_type}` |" in card


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.slow
def test_trains_a_lora_adapter_and_its_checkpoint_reloads(variant, tmp_path):
    trainer_class, config_class, _, _ = VARIANTS[variant]
    task = fresh_toy_task(WARM_START_STEPS)
    base_before = parameters(task.model)
    pristine_base = copy.deepcopy(task.model)
    config = toy_config(config_class, tmp_path, max_steps=2, save_strategy="steps", save_steps=2,
                        learning_rate=1e-2)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = toy_trainer(trainer_class, config, task, peft_config=lora)
    assert isinstance(trainer.model, PeftModel)
    adapter_before = {n: p for n, p in parameters(trainer.model).items() if "lora_" in n}
    assert adapter_before
    trainer.train()

    after = parameters(trainer.model)
    assert changed(adapter_before, after), "training moved no adapter weight"
    base_after = {name.replace("base_model.model.", "").replace(".base_layer", ""): value
                  for name, value in after.items() if "lora_" not in name}
    assert not changed(base_before, base_after), "LoRA training must leave the base weights alone"

    checkpoint = tmp_path / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    reloaded = PeftModel.from_pretrained(pristine_base, checkpoint)
    reloaded_adapter = {n: p for n, p in parameters(reloaded).items() if "lora_" in n}
    assert reloaded_adapter.keys() == adapter_before.keys()
    assert not changed(reloaded_adapter, {n: after[n] for n in reloaded_adapter})
    assert "trl-variants" in card_tags(read_card(tmp_path))


GRPO_SCRIPT = """
from trl import GRPOConfig, GRPOTrainer

config = GRPOConfig(
    output_dir,
    use_cpu=True,
    bf16=False,
    report_to=[],
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=4,
    learning_rate=1e-3,
    max_steps=2,
    logging_steps=1,
    save_strategy="no",
    seed=0,
)
trainer = GRPOTrainer(
    model=task.model,
    reward_funcs=task.reward_funcs,
    args=config,
    train_dataset=task.train_dataset,
    processing_class=task.tokenizer,
)
trainer.train()
"""


def swapped(script: str, trainer_name: str, config_name: str) -> str:
    """The one-line swap: import from trl_variants and rename the two classes."""
    return (
        script.replace("from trl import", "from trl_variants import")
        .replace("GRPOConfig", config_name)
        .replace("GRPOTrainer", trainer_name)
    )


@pytest.mark.parametrize(
    ("trainer_name", "config_name"), [("GRPOTrainer", "GRPOConfig"), ("DAPOTrainer", "DAPOConfig"),
                                      ("DrGRPOTrainer", "DrGRPOConfig")]
)
def test_a_grpo_script_runs_with_only_the_class_names_swapped(trainer_name, config_name, tmp_path):
    script = GRPO_SCRIPT if trainer_name == "GRPOTrainer" else swapped(GRPO_SCRIPT, trainer_name, config_name)
    assert script.count(trainer_name) == 2 and script.count(config_name) == 2
    task = fresh_toy_task(WARM_START_STEPS)
    before = parameters(task.model)
    namespace = {"task": task, "output_dir": str(tmp_path)}
    exec(compile(script, f"<{trainer_name} script>", "exec"), namespace)

    trainer = namespace["trainer"]
    assert type(trainer).__name__ == trainer_name and type(trainer.args).__name__ == config_name
    assert trainer.state.global_step == 2
    assert changed(before, parameters(trainer.model))
    if trainer_name == "DAPOTrainer":
        assert (trainer.epsilon_low, trainer.epsilon_high, trainer.loss_type) == (0.2, 0.28, "dapo")
    if trainer_name == "DrGRPOTrainer":
        assert (trainer.loss_type, trainer.scale_rewards) == ("dr_grpo", "none")


def test_trainers_take_grpo_trainer_arguments_positionally(tmp_path):
    task = fresh_toy_task()
    config = toy_config(DAPOConfig, tmp_path)
    # GRPOTrainer's order: model, reward_funcs, args, train_dataset, eval_dataset, processing_class.
    trainer = DAPOTrainer(task.model, task.reward_funcs, config, task.train_dataset, task.eval_dataset, task.tokenizer)
    assert trainer.train_dataset is task.train_dataset and trainer.eval_dataset is task.eval_dataset
    assert trainer.processing_class is task.tokenizer


@pytest.fixture
def bf16_capable_device(monkeypatch):
    """GRPOConfig defaults to bf16=True, which transformers refuses on a CPU-only machine (for GRPOTrainer too).
    The default-config tests stand in a bf16-capable accelerator there; that is the only thing replaced."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)


@pytest.mark.parametrize(
    ("trainer_class", "config_class", "suffix"),
    [(DAPOTrainer, DAPOConfig, "-DAPO"), (DrGRPOTrainer, DrGRPOConfig, "-Dr-GRPO")],
)
def test_args_none_builds_the_variant_default_config(
    trainer_class, config_class, suffix, bf16_capable_device, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default output_dir is relative to the working directory
    task = fresh_toy_task()
    task.model.config._name_or_path = "toy-org/tiny-adder"
    trainer = trainer_class(task.model, task.reward_funcs, train_dataset=task.train_dataset,
                            processing_class=task.tokenizer)
    assert type(trainer.args) is config_class
    assert trainer.args.output_dir == f"tiny-adder{suffix}"
    defaults = config_class("unused", use_cpu=True, bf16=False)
    for name in ("epsilon", "epsilon_high", "loss_type", "scale_rewards", "beta"):
        assert getattr(trainer.args, name) == getattr(defaults, name), name


def test_args_none_on_cpu_fails_like_grpo_trainer(tmp_path, monkeypatch):
    """Without a bf16-capable device, args=None fails inside transformers for GRPOTrainer and the variants alike;
    the variants add no failure of their own."""
    if torch.cuda.is_available():
        pytest.skip("only meaningful on a CPU-only machine")
    monkeypatch.chdir(tmp_path)
    task = fresh_toy_task()
    messages = []
    for trainer_class in (GRPOTrainer, DAPOTrainer, DrGRPOTrainer):
        with pytest.raises(ValueError) as error:
            trainer_class(task.model, task.reward_funcs, train_dataset=task.train_dataset,
                          processing_class=task.tokenizer)
        messages.append(str(error.value))
    assert len(set(messages)) == 1 and "bf16" in messages[0]
