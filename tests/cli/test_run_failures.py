"""A training run that stops for a reason the user can change is one line through the real command line, exit code
1, saying what to change: the Hub out of reach or refusing to push (before training, or after it, naming the
folder that holds the trained model), and dynamic sampling running out of rounds."""

import sys

import pytest
from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError
from huggingface_hub.hf_api import RepoUrl
from huggingface_hub.utils import get_session, hf_raise_for_status

from trl_variants.cli import main
from trl_variants.cli.common import CliRunError
from trl_variants.cli.train import raise_hub_failure
from trl_variants.model_card import settings_section

from .errors import one_error_line
from .test_commands import toy_files, toy_flags  # noqa: F401 - the fixture

UNREACHABLE_HUB = "http://127.0.0.1:9"  # nothing listens on the discard port


def run_error(capsys, argv) -> str:
    assert main(argv) == 1
    return one_error_line(capsys.readouterr().err).removeprefix("trl-variants: error: ")


def test_push_with_the_hub_offline_stops_before_training_in_one_line(toy_files, tmp_path, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "out"), "--reward_funcs", "dapo_accuracy",
            "--push_to_hub", "true", "--hub_model_id", "someone/toy-dapo"]  # fmt: skip
    line = run_error(capsys, argv)
    assert line.startswith(f"push_to_hub to {constants.ENDPOINT} failed (OfflineModeIsEnabled: ")
    assert "HF_HUB_OFFLINE" in line and "nothing was trained; pass --push_to_hub false" in line
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_push_after_training_with_the_hub_unreachable_names_the_saved_model(toy_files, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The repository is created (the mocked boundary); the upload then meets a Hub endpoint where nothing listens,
    as a machine without network does: the connection error is real."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", UNREACHABLE_HUB)
    monkeypatch.setattr(HfApi, "create_repo", lambda self, repo_id, **kwargs: RepoUrl(f"{UNREACHABLE_HUB}/{repo_id}"))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kwargs: get_session().get(f"{UNREACHABLE_HUB}/api"))
    output_dir = tmp_path / "out"
    argv = ["dapo", *toy_flags(toy_files, output_dir), "--reward_funcs", "dapo_accuracy",
            "--push_to_hub", "true", "--hub_model_id", "someone/toy-dapo"]  # fmt: skip
    line = run_error(capsys, argv)
    assert line.startswith(f"push_to_hub to {UNREACHABLE_HUB} failed (ConnectError")
    assert f"the trained model is saved in {output_dir}; upload it later with `hf upload someone/toy-dapo" in line
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "README.md").is_file()


def test_refused_or_missing_credentials_name_the_login():
    """A 401 answer, read by the Hub client as it reads the Hub's own, and no token at all name the login; another
    HTTP error of the Hub is one line too; any other error is left to its caller."""
    http = sys.modules[type(get_session()).__module__.split(".")[0]]  # the HTTP library the Hub client uses
    request = http.Request("POST", f"{constants.ENDPOINT}/api/repos/create")
    with pytest.raises(HfHubHTTPError) as refused:
        hf_raise_for_status(http.Response(401, request=request))
    with pytest.raises(HfHubHTTPError) as conflict:
        hf_raise_for_status(http.Response(409, request=request))
    for error, login in ((refused.value, True), (LocalTokenNotFoundError("Token is required"), True),
                         (conflict.value, False)):  # fmt: skip
        with pytest.raises(CliRunError) as raised:
            raise_hub_failure(error, "nothing was trained")
        message = str(raised.value)
        assert message.startswith(f"push_to_hub to {constants.ENDPOINT} failed ({type(error).__name__}: ")
        assert message.endswith("; nothing was trained.") and "\n" not in message
        assert ("log in with `hf auth login` or set HF_TOKEN" in message) is login
    assert raise_hub_failure(ValueError("not the Hub"), "nothing was trained") is None


def test_dynamic_sampling_out_of_rounds_is_one_line_saying_what_to_change(toy_files, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A constant reward leaves every group without signal, so `dynamic_sampling_on_exhausted="raise"` stops."""
    (tmp_path / "constant_reward.py").write_text(
        "def constant(completions, **kwargs):\n    return [1.0] * len(completions)\n"
    )
    monkeypatch.chdir(tmp_path)  # a reward module in the working directory is found without installing it
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["dapo", *toy_flags(toy_files, tmp_path / "out"), "--reward_funcs", "constant_reward.constant",
            "--dynamic_sampling_on_exhausted", "raise", "--dynamic_sampling_max_rounds", "2"]  # fmt: skip
    line = run_error(capsys, argv)
    assert line.startswith("training stopped at step 0")
    assert "Dynamic sampling found 0 informative groups" in line
    assert 'dynamic_sampling_max_rounds' in line and 'dynamic_sampling_on_exhausted="fill"' in line


def test_the_model_card_links_no_package_index_page():
    text = settings_section("DAPO", {"loss_type": "dapo"}, steps=3)
    assert "pypi.org" not in text
    assert "install trl-variants from a clone of its repository with `pip install .`" in text
