"""Pushing to the Hub, offline: the Hub client's repository and upload calls are intercepted where transformers
makes them (`HfApi.create_repo`, `HfApi.upload_folder`), and the files that would be uploaded are checked."""

import importlib.util
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoUrl
from huggingface_hub.utils import filter_repo_objects

from trl_variants.toy import make_toy_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def hub(monkeypatch):
    """Records repository creations and, for each upload, the files that would be sent and their contents."""
    calls = {"created": [], "uploads": []}

    def create_repo(self, repo_id, *, token=None, private=None, exist_ok=False, **kwargs):
        calls["created"].append({"repo_id": repo_id, "private": private})
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, *, repo_id, folder_path, ignore_patterns=None, **kwargs):
        folder = Path(folder_path)
        relative = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
        sent = list(filter_repo_objects(relative, ignore_patterns=ignore_patterns))
        calls["uploads"].append({"repo_id": repo_id, "files": {name: (folder / name).read_bytes() for name in sent}})
        return f"https://huggingface.co/{repo_id}/commit/0"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return calls


def load_push_example():
    spec = importlib.util.spec_from_file_location("example_push_to_hub", EXAMPLES / "push_to_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_push_uploads_the_model_with_a_dapo_model_card(hub, tmp_path, monkeypatch):
    example = load_push_example()
    real_make_toy_task = example.make_toy_task

    def toy_task_with_a_hub_base_model(seed):
        task = real_make_toy_task(seed=seed)
        # As if the policy had been loaded from the Hub, so the card has a base model to name.
        task.model.config._name_or_path = "trl-variants/toy-addition-base"
        return task

    monkeypatch.setattr(example, "make_toy_task", toy_task_with_a_hub_base_model)
    example.main("someone/toy-dapo", output_dir=str(tmp_path / "out"), steps=2)

    assert hub["created"] == [{"repo_id": "someone/toy-dapo", "private": True}]
    (upload,) = hub["uploads"]
    assert upload["repo_id"] == "someone/toy-dapo"
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json"} <= set(upload["files"])

    card = upload["files"]["README.md"].decode()
    front_matter = card.split("---")[1]
    for tag in ("trl", "trl-variants", "dapo"):
        assert f"- {tag}" in front_matter
    assert "base_model: trl-variants/toy-addition-base" in front_matter
    assert "DAPO" in card and "2503.14476" in card and "@article{yu2025dapo" in card
    # The key settings: clip range, loss aggregation, overlong filtering and punishment, dynamic sampling.
    for setting in (
        "| `clip range (epsilon, epsilon_high)` | `(0.2, 0.28)` |",
        "| `loss_type` | `dapo` |",
        "| `overlong filtering (mask_truncated_completions)` | `False` |",
        "| `soft overlong punishment (buffer, factor)` | `(2, 1.0)` |",
        "| `dynamic_sampling` | `regenerate` |",
    ):
        assert setting in card, setting
    assert "trl_variants.toy" in card  # the dataset name passed to push_to_hub


@pytest.mark.slow
def test_dr_grpo_push_card_names_its_variant(hub, tmp_path):
    from trl_variants import DrGRPOConfig, DrGRPOTrainer

    task = make_toy_task(seed=0)
    args = DrGRPOConfig(
        str(tmp_path / "out"), push_to_hub=True, hub_model_id="someone/toy-dr-grpo", hub_strategy="end",
        use_cpu=True, per_device_train_batch_size=8, num_generations=4, max_completion_length=4,
        max_steps=1, report_to=[], save_strategy="no",
    )  # fmt: skip
    trainer = DrGRPOTrainer(
        task.model, task.reward_funcs, args=args, train_dataset=task.train_dataset, processing_class=task.tokenizer
    )
    trainer.train()
    trainer.push_to_hub()
    card = hub["uploads"][-1]["files"]["README.md"].decode()
    assert "- dr-grpo" in card and "2503.20783" in card
    assert "| `loss_type` | `dr_grpo` |" in card and "| `scale_rewards` | `none` |" in card
