"""The import check: the package imports next to any TRL in which the code it relies on (`trl_surface/entries.py`)
is unchanged from the last TRL tested, and refuses one in which some changed with a one-line ImportError naming the
installed version, the changed entries and the version tested. Checked against the installed TRL, against copies of
it with one function changed, and against the real TRL 1.15.0 wheel (downloaded once into the package's cache)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import trl_variants
from trl_variants._compat import ALLOW_CHANGED_TRL, FINGERPRINTS, changed_trl_entries, check_trl
from trl_variants.smollm2 import cache_root
from trl_variants.trl_surface.compare import compare, libraries, trl_changes
from trl_variants.trl_surface.source import installed_library, library_in

REPO = Path(__file__).resolve().parents[1]
RECORDED = json.loads(FINGERPRINTS.read_text(encoding="utf-8"))
TESTED = RECORDED["versions"]["trl"]
INSTALLED = installed_library("trl")
installed_is_tested = pytest.mark.skipif(
    INSTALLED.version != TESTED, reason=f"the installed TRL is {INSTALLED.version}, not {TESTED}, the one recorded"
)

# What TRL 1.15.0 differs in from 1.16.0 among the TRL code the package relies on (`python -m trl_variants.trl_surface
# --trl-path` with 1.15.0 lists the same nine, with their diffs).
TRL_1_15_CHANGES = [
    "trl.GRPOConfig",
    "GRPOConfig.__post_init__",
    "GRPOTrainer.__init__",
    "GRPOTrainer._generate_single_turn",
    "GRPOTrainer._generate",
    "GRPOTrainer._tool_call_loop",
    "trl.generation.vllm_generation.VLLMGeneration",
    "trl.models.utils.unwrap_model_for_generation",
    "trl.models.utils._unwrap_model_for_generation",
]


@pytest.fixture(autouse=True)
def _no_escape_hatch(monkeypatch):
    monkeypatch.delenv(ALLOW_CHANGED_TRL, raising=False)


def test_pyproject_requires_trl_from_the_tested_minor_with_no_upper_bound():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["vllm"]]
    trl = [requirement for requirement in requirements if requirement.name == "trl"]
    assert [str(requirement) for requirement in trl] == ["trl>=1.16", "trl[vllm]>=1.16"]
    assert all(requirement.specifier.contains(TESTED) for requirement in trl)


# The installed TRL, the one tested.


@installed_is_tested
def test_the_installed_trl_passes():
    assert changed_trl_entries() == (None, [], TESTED)
    check_trl()
    assert trl_variants.__name__ == "trl_variants"  # imported, with the check, by this module's imports


def test_the_record_keeps_a_digest_of_every_trl_file_an_entry_is_looked_up_in():
    files = RECORDED["trl_files"]
    sources = {saved["source"].partition(":")[0] for saved in RECORDED["entries"].values()}
    assert {path for path in sources if path.startswith("trl/")} <= set(files)
    assert {"trl/trainer/base_trainer.py", "trl/trainer/base_config.py"} <= set(files)  # the classes' chains
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in files.values())


# Copies of the installed TRL's recorded files, one function changed.


def trl_copy(folder: Path, version: str = "1.16.99") -> Path:
    """A folder holding `trl/`: the installed TRL's files the record names, and an `__init__.py` of `version`."""
    for path in RECORDED["trl_files"]:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(INSTALLED.root.parent / path, folder / path)
    (folder / "trl" / "__init__.py").write_text(f'__version__ = "{version}"\n', encoding="utf-8")
    return folder


def edit(folder: Path, path: str, old: str, new: str) -> None:
    file = folder / path
    source = file.read_text(encoding="utf-8")
    assert source.count(old) >= 1, (path, old)
    file.write_text(source.replace(old, new, 1), encoding="utf-8")


@installed_is_tested
def test_a_trl_whose_files_differ_only_in_comments_passes(tmp_path):
    folder = trl_copy(tmp_path)
    edit(folder, "trl/trainer/grpo_trainer.py", "class GRPOTrainer(", "# A comment.\nclass GRPOTrainer(")
    edit(folder, "trl/trainer/utils.py", "def pad(", "\n\ndef pad(")
    assert changed_trl_entries(folder) == ("1.16.99", [], TESTED)
    check_trl(folder)


@installed_is_tested
def test_a_trl_with_a_changed_a_removed_and_a_newly_overridden_function_is_refused_naming_them(tmp_path):
    folder = trl_copy(tmp_path)
    edit(folder, "trl/trainer/utils.py", "def pad(", "def pad_tensors(")
    line = next(line for line in (folder / "trl/trainer/utils.py").read_text().splitlines()
                if line.startswith("def get_config_model_id("))  # fmt: skip
    edit(folder, "trl/trainer/utils.py", line, f"{line}\n    config = getattr(config, 'text_config', config)")
    # `_get_dataloader` is recorded where transformers' Trainer defines it: TRL overriding it is a change too.
    override = "    def _get_dataloader(self, *args, **kwargs):\n        return None\n\n"
    edit(folder, "trl/trainer/grpo_trainer.py", "    def _get_train_sampler(", f"{override}    def _get_train_sampler(")

    changed = [
        "GRPOTrainer._get_dataloader",
        "trl.trainer.utils.pad (not found)",
        "trl.trainer.utils.get_config_model_id",
    ]
    assert changed_trl_entries(folder) == ("1.16.99", changed, TESTED)
    with pytest.raises(ImportError) as error:
        check_trl(folder)
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        f"the installed trl 1.16.99 differs from trl {TESTED}, the last version tested, in TRL code trl_variants "
        f"relies on: {', '.join(changed)}. Install trl=={TESTED}, or set {ALLOW_CHANGED_TRL}=1 to import it anyway."
    )


@installed_is_tested
def test_the_escape_hatch_turns_the_refusal_into_a_warning(tmp_path, monkeypatch):
    folder = trl_copy(tmp_path)
    edit(folder, "trl/trainer/utils.py", "def pad(", "def pad_tensors(")
    monkeypatch.setenv(ALLOW_CHANGED_TRL, "1")
    expected = rf"relies on: trl\.trainer\.utils\.pad \(not found\); imported anyway since {ALLOW_CHANGED_TRL}=1\.$"
    with pytest.warns(UserWarning, match=expected):
        check_trl(folder)
    monkeypatch.setenv(ALLOW_CHANGED_TRL, "0")
    with pytest.raises(ImportError, match="trl.trainer.utils.pad"):
        check_trl(folder)


@pytest.mark.parametrize("value", ["yes", "true", " 1"])
def test_the_escape_hatch_refuses_other_values(monkeypatch, value):
    monkeypatch.setenv(ALLOW_CHANGED_TRL, value)
    expected = rf"^{ALLOW_CHANGED_TRL}={re.escape(repr(value))} is not allowed: set it to 1"
    with pytest.raises(ImportError, match=expected):
        check_trl()


def test_a_folder_without_trl_is_refused(tmp_path):
    expected = rf"no trl package is installed in {re.escape(str(tmp_path))}: pip install trl=={re.escape(TESTED)}$"
    with pytest.raises(ImportError, match=expected):
        check_trl(tmp_path)


# The real TRL 1.15.0.


@pytest.fixture(scope="session")
def trl_1_15(tmp_path_factory) -> Path:
    """A folder holding TRL 1.15.0's `trl/` and its `.dist-info`, from its wheel: taken from the package's cache
    (`$TRL_VARIANTS_CACHE/trl-wheels`), downloaded there with pip where missing, the test skipped where pip cannot."""
    cache = cache_root() / "trl-wheels"
    wheel = cache / "trl-1.15.0-py3-none-any.whl"
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as download:  # beside the wheel's place, for the rename
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--retries",
                       "0", "--timeout", "20", "--disable-pip-version-check", "trl==1.15.0", "-d", download]
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
            downloaded = Path(download) / wheel.name
            if result.returncode != 0 or not downloaded.is_file():
                last = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[-1]
                pytest.skip(f"the TRL 1.15.0 wheel is not in {cache} and `pip download trl==1.15.0` failed: {last}")
            os.replace(downloaded, wheel)
    folder = tmp_path_factory.mktemp("trl-1.15.0")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder)
    assert library_in("trl", folder).version == "1.15.0"
    return folder


@installed_is_tested
def test_trl_1_15_is_refused_naming_what_the_surface_command_reports_changed(trl_1_15):
    installed, changed, tested = changed_trl_entries(trl_1_15)
    assert (installed, changed, tested) == ("1.15.0", TRL_1_15_CHANGES, TESTED)
    # The same entries as the command's full comparison (whose transformers entries are the installed ones).
    comparisons = compare(RECORDED, libraries(trl_1_15), {})
    assert [c.entry.name for c in comparisons if c.status != "unchanged"] == TRL_1_15_CHANGES
    assert trl_changes(RECORDED, library_in("trl", trl_1_15), set(RECORDED["trl_files"])) == TRL_1_15_CHANGES


def import_next_to(trl_folder: Path | None, **env) -> subprocess.CompletedProcess:
    """`import trl_variants` from this repository in a fresh Python that finds `trl` in `trl_folder` first (the
    installed one where `None`)."""
    environment = {key: value for key, value in os.environ.items() if key != ALLOW_CHANGED_TRL}
    folders = [str(REPO)] if trl_folder is None else [str(trl_folder), str(REPO)]
    environment.update(PYTHONPATH=os.pathsep.join(folders), **env)
    code = (
        "import sys, trl_variants, trl; "
        "print(trl.__version__, trl_variants.__file__, 'trl_variants.trl_surface.source' in sys.modules)"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environment, capture_output=True, text=True)


@installed_is_tested
def test_importing_the_package_next_to_trl_1_15_fails_with_one_line(trl_1_15):
    result = import_next_to(trl_1_15)
    assert result.returncode == 1, result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"ImportError: the installed trl 1.15.0 differs from trl {TESTED}, the last version tested, in TRL code "
        f"trl_variants relies on: {', '.join(TRL_1_15_CHANGES)}. Install trl=={TESTED}, or set {ALLOW_CHANGED_TRL}=1 "
        "to import it anyway."
    )
    assert f"{REPO / 'trl_variants' / '__init__.py'}" in result.stderr  # the package of this repository refused


@installed_is_tested
def test_the_escape_hatch_imports_the_package_next_to_trl_1_15(trl_1_15):
    result = import_next_to(trl_1_15, **{ALLOW_CHANGED_TRL: "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.15.0", str(REPO / "trl_variants" / "__init__.py"), "True"]
    assert f"UserWarning: the installed trl 1.15.0 differs from trl {TESTED}" in result.stderr
    assert f"imported anyway since {ALLOW_CHANGED_TRL}=1." in result.stderr


@installed_is_tested
def test_importing_the_package_next_to_the_installed_trl_succeeds_without_reading_a_syntax_tree():
    """Every recorded TRL file is byte-identical, so the check compares digests and never imports the fingerprinting
    (`trl_surface.source`), which a changed file needs (the escape hatch's import above does)."""
    result = import_next_to(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [TESTED, str(REPO / "trl_variants" / "__init__.py"), "False"]
    assert not result.stderr
