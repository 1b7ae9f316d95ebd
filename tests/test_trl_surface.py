"""What the package takes from TRL, kept in view: each trainer's docstring names every `GRPOTrainer` method the
class overrides, and `trl_variants.trl_surface` lists every TRL name the package imports, overrides or calls by name,
with fingerprints that `python -m trl_variants.trl_surface` compares with a TRL release."""

import ast
import importlib
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest
from trl import GRPOConfig, GRPOTrainer

from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer
from trl_variants.trl_surface.__main__ import main
from trl_variants.trl_surface.compare import FINGERPRINTS, libraries, load_fingerprints, record
from trl_variants.trl_surface.entries import CLASS_CHAINS, ENTRIES, PRIVATE_USES_OUTSIDE_HOOKS
from trl_variants.trl_surface.source import find_at, installed_library, locate

PACKAGE = Path(__file__).resolve().parents[1] / "trl_variants"
ENTRY_NAMES = {entry.name for entry in ENTRIES}
RECORDED = load_fingerprints()
INSTALLED_IS_RECORDED = all(
    (library := installed_library(name)) is not None and library.version == version
    for name, version in RECORDED["versions"].items()
)
recorded_versions_only = pytest.mark.skipif(
    not INSTALLED_IS_RECORDED, reason=f"the installed TRL or transformers is not {RECORDED['versions']}"
)


def overrides(cls, base) -> dict[str, type]:
    """Every callable attribute of `cls` that `base` also has and whose object differs from `base`'s, mapped to
    the class of `cls`'s MRO that defines it. Methods `@dataclass` generates are left out."""
    found = {}
    for name in dir(base):
        ours = inspect.getattr_static(cls, name)
        function = getattr(ours, "__func__", ours)
        if ours is inspect.getattr_static(base, name) or not callable(function):
            continue
        owner = next(klass for klass in cls.__mro__ if name in vars(klass))
        code = getattr(function, "__code__", None)
        if code is None or code.co_filename == inspect.getfile(owner):
            found[name] = owner
    return found


# Docstrings.


def docstring_bullets(cls) -> set[str]:
    return set(re.findall(r"^\s*- `([A-Za-z_]\w*)`", inspect.getdoc(cls), re.M))


@pytest.mark.parametrize("trainer", [DAPOTrainer, DrGRPOTrainer])
def test_each_trainer_docstring_names_every_method_it_overrides(trainer):
    overridden = set(overrides(trainer, GRPOTrainer))
    assert {"__init__", "_calculate_rewards", "create_model_card"} <= overridden  # the introspection sees them
    named = docstring_bullets(trainer)
    assert not overridden - named, f"{trainer.__name__}'s docstring does not name {sorted(overridden - named)}"
    assert not named - overridden, f"{trainer.__name__}'s docstring names {sorted(named - overridden)}, not overridden"


@pytest.mark.parametrize("config", [DAPOConfig, DrGRPOConfig])
def test_each_config_docstring_names_what_it_overrides(config):
    overridden = set(overrides(config, GRPOConfig))
    # DAPOConfig's `__new__` refuses a removed field, which the dataclass's `__init__` would call only unexpected.
    assert overridden == {"__post_init__"} | ({"__new__"} if config is DAPOConfig else set())
    for name in overridden:
        assert f"`{name}`" in inspect.getdoc(config), f"{config.__name__}'s docstring does not name {name}"


def test_the_override_count_sees_mixin_methods_and_skips_generated_ones():
    found = overrides(DAPOTrainer, GRPOTrainer)
    assert found["_generate_single_turn"].__name__ == "DynamicSamplingMixin"
    assert found["_get_dataloader"].__name__ == "DynamicSamplingMixin"
    assert "__repr__" not in overrides(DAPOConfig, GRPOConfig)  # written by @dataclass


# The surface list covers what the package takes from TRL.


def package_trees():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def imported_trl_names() -> dict[str, str]:
    """Every TRL name the package imports, dotted (`trl.trainer.utils.pad`), with a file importing it. For
    `import trl.x as alias`, the names read as `alias.name`."""
    names = {}
    for path, tree in package_trees():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] == "trl":
                names.update({f"{node.module}.{alias.name}": path.name for alias in node.names})
            elif isinstance(node, ast.Import):
                aliases.update({a.asname or a.name: a.name for a in node.names if a.name.split(".")[0] == "trl"})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                names[f"{aliases[node.value.id]}.{node.attr}"] = path.name
    return names


def package_classes_with_trl_bases() -> list[type]:
    classes = []
    for path, tree in package_trees():
        if not any(isinstance(node, ast.ClassDef) and node.bases for node in ast.walk(tree)):
            continue
        module_name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module_name:
                if any(base.__module__.split(".")[0] == "trl" for base in value.__mro__[1:]):
                    classes.append(value)
    return classes


def overridden_trl_methods() -> dict[str, str]:
    """`TRLClass.method` for every method a package class overrides where TRL or transformers defines it."""
    names = {}
    for cls in package_classes_with_trl_bases():
        base = next(klass for klass in cls.__mro__[1:] if klass.__module__.split(".")[0] == "trl")
        for name in overrides(cls, base):
            definer = next(klass for klass in base.__mro__ if name in vars(klass))
            if definer.__module__.split(".")[0] in ("trl", "transformers"):
                names[f"{base.__name__}.{name}"] = cls.__name__
    return names


def grpo_methods_called_by_name() -> dict[str, str]:
    """`GRPOTrainer._name` for every private GRPOTrainer method the package reaches on `self`, `trainer` or
    `super()`, or names in a string (to intercept it)."""
    names = {}
    for path, tree in package_trees():
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                value = node.value
                receiver = isinstance(value, ast.Name) and value.id in ("self", "trainer")
                if receiver or (isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super"):
                    name = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
                name = node.value
            if name and not name.startswith("__") and callable(getattr(GRPOTrainer, name, None)):
                names[f"GRPOTrainer.{name}"] = path.name
    return names


def test_every_trl_name_the_package_imports_is_listed():
    imported = imported_trl_names()
    assert {"trl.GRPOTrainer", "trl.trainer.utils.RepeatSampler", "trl.trainer.utils.pad"} <= set(imported)
    missing = {name: where for name, where in imported.items() if name not in ENTRY_NAMES}
    assert not missing, f"add these imports to trl_variants/trl_surface/entries.py: {missing}"


def test_every_trl_method_the_package_overrides_is_listed():
    overridden = overridden_trl_methods()
    assert {"GRPOTrainer._generate_single_turn", "GRPOConfig.__post_init__", "RepeatSampler.__iter__"} <= set(
        overridden
    )
    missing = {name: cls for name, cls in overridden.items() if name not in ENTRY_NAMES}
    assert not missing, f"add these overrides to trl_variants/trl_surface/entries.py: {missing}"


def test_every_private_grpo_method_the_package_calls_is_listed():
    called = grpo_methods_called_by_name()
    assert {"GRPOTrainer._generate", "GRPOTrainer._get_per_token_logps_and_entropies"} <= set(called)
    missing = {name: where for name, where in called.items() if name not in ENTRY_NAMES}
    assert not missing, f"add these methods to trl_variants/trl_surface/entries.py: {missing}"


def test_private_trainer_state_the_package_reads_is_named_in_an_entry():
    """TRL's private attributes (`self._x = ...` anywhere in GRPOTrainer) that the package reads on the trainer
    must be named in the `relies_on` text of an entry, so a maintainer reading a diff knows to look for them."""
    trl_tree = ast.parse(Path(inspect.getsourcefile(GRPOTrainer)).read_text(encoding="utf-8"))
    assigned = {
        node.attr
        for node in ast.walk(trl_tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr.startswith("_")
    }  # fmt: skip
    read = {
        node.attr
        for _, tree in package_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "trainer")
    }
    texts = " ".join(entry.relies_on for entry in ENTRIES)
    relied = assigned & read
    assert {"_metrics", "_tokenizer"} <= relied
    unnamed = sorted(name for name in relied if not re.search(rf"\b{re.escape(name)}\b", texts))
    assert not unnamed, f"name these GRPOTrainer attributes in an entry's relies_on: {unnamed}"


def test_the_static_lookup_finds_what_python_imports():
    """Each entry's location, found by reading the source, is where the installed TRL defines the object."""
    live_classes = {name: getattr(importlib.import_module("trl"), name) for name in ("GRPOTrainer", "GRPOConfig")}
    live_classes["TrlParser"] = importlib.import_module("trl").TrlParser
    live_classes["RepeatSampler"] = importlib.import_module("trl.trainer.utils").RepeatSampler
    assert set(live_classes) == set(CLASS_CHAINS)
    libs = libraries()
    for entry in ENTRIES:
        found = locate(entry, libs)
        assert found is not None, entry.name
        path, _, qualname = found.location.partition(":")
        if entry.source is None:
            class_name, _, member = entry.name.partition(".")
            live = inspect.getattr_static(live_classes[class_name], member)
        else:
            module, _, name = entry.name.rpartition(".")
            live = getattr(importlib.import_module(module), name)
        if found.text.startswith(("from ", "import ")):
            continue  # a module-level name bound by an import: found by its binding statement
        live = inspect.unwrap(getattr(live, "__func__", live))
        assert inspect.getsourcefile(live).endswith(path), (entry.name, found.location)
        assert live.__qualname__ == qualname, (entry.name, found.location)


# Fingerprints and the command.


@recorded_versions_only
def test_the_fingerprints_are_those_of_the_installed_trl():
    assert record(libraries()) == RECORDED, "run `python -m trl_variants.trl_surface --record`"


@recorded_versions_only
def test_the_command_reports_every_entry_unchanged_on_the_recorded_trl(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert f"{len(ENTRIES)} entries: {len(ENTRIES)} unchanged, 0 changed, 0 missing." in out


@recorded_versions_only
def test_an_altered_fingerprint_is_reported_changed(tmp_path, capsys):
    altered = json.loads(FINGERPRINTS.read_text(encoding="utf-8"))
    altered["entries"]["GRPOTrainer._generate"]["fingerprint"] = "0" * 16
    path = tmp_path / "fingerprints.json"
    path.write_text(json.dumps(altered), encoding="utf-8")
    assert main(["--fingerprints", str(path)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^changed +GRPOTrainer\._generate$", out, re.M)
    assert f"{len(ENTRIES) - 1} unchanged, 1 changed, 0 missing." in out
    assert "(no recorded trl at hand for a diff (--recorded-source DIR))" in out
    # Named as the recorded source, the installed TRL is refused for this entry: its source does not match.
    assert main(["--fingerprints", str(path), "--recorded-source", str(installed_library("trl").root.parent)]) == 1
    assert f"(trl {RECORDED['versions']['trl']}) is not the recorded source of this entry" in capsys.readouterr().out


@recorded_versions_only
def test_a_trl_folder_with_a_changed_and_a_removed_function_gets_a_diff_and_missing(tmp_path, capsys):
    """A TRL tree holding only `trainer/utils.py`, in which `get_config_model_id` gained a line and `pad` is gone:
    entries there are changed (with a diff against the installed TRL, the recorded version) or missing, and
    every entry defined in other files is missing."""
    installed = installed_library("trl")
    tree = tmp_path / "trl"
    (tree / "trainer").mkdir(parents=True)
    (tree / "__init__.py").write_text('__version__ = "1.16.99"\n', encoding="utf-8")
    source = (installed.root / "trainer" / "utils.py").read_text(encoding="utf-8")
    original = find_at({"trl": installed}, "trl/trainer/utils.py:get_config_model_id").text.splitlines()[0]
    assert original.startswith("def get_config_model_id(")
    source = source.replace(original, f"{original}\n    config = getattr(config, 'text_config', config)", 1)
    source = source.replace("def pad(", "def pad_tensors(", 1)
    (tree / "trainer" / "utils.py").write_text(source, encoding="utf-8")

    assert main(["--trl-path", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "trl 1.16.99" in out
    assert re.search(r"^changed +trl\.trainer\.utils\.get_config_model_id$", out, re.M)
    assert re.search(r"^missing +trl\.trainer\.utils\.pad +\(was trl/trainer/utils\.py:pad\)$", out, re.M)
    assert re.search(r"^unchanged +RepeatSampler\.__iter__$", out, re.M)
    assert re.search(r"^missing +GRPOTrainer\._generate", out, re.M)
    assert "+    config = getattr(config, 'text_config', config)" in out
    assert "--- trl/trainer/utils.py:get_config_model_id (recorded)" in out


def test_a_trl_path_without_trl_is_refused(tmp_path, capsys):
    assert main(["--trl-path", str(tmp_path)]) == 2
    assert f"--trl-path {str(tmp_path)!r} holds no TRL" in capsys.readouterr().err


def test_only_trl_hooks_replaces_trl_attributes_at_run_time():
    """Every run-time interception of TRL is in `dynamic_sampling/trl_hooks.py`: no other module assigns to (or
    `setattr`s, or writes into the `__dict__` of) an attribute that `GRPOTrainer` defines or sets, on the trainer or
    its accelerator, or to a name of an imported TRL module."""
    trl_tree = ast.parse(Path(inspect.getsourcefile(GRPOTrainer)).read_text(encoding="utf-8"))
    trl_attributes = {
        node.attr
        for node in ast.walk(trl_tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name) and node.value.id == "self"
    } | {name for name in dir(GRPOTrainer) if not name.startswith("__")}  # fmt: skip
    found = []
    for path, tree in package_trees():
        if path.name == "trl_hooks.py":
            continue
        trl_modules = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.split(".")[0] == "trl"
        }
        # `self` is a trainer in the trainers and their mixins; `trainer` is one everywhere.
        trainer_classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                           and node.name.endswith(("Mixin", "Trainer"))]  # fmt: skip
        in_trainer = {id(node) for cls in trainer_classes for node in ast.walk(cls)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                receiver = node.value
                names = ("self", "trainer") if id(node) in in_trainer else ("trainer",)
                if isinstance(receiver, ast.Attribute) and receiver.attr == "accelerator":
                    found.append(where)
                elif isinstance(receiver, ast.Name) and receiver.id in trl_modules:
                    found.append(where)
                elif isinstance(receiver, ast.Name) and receiver.id in names and node.attr in trl_attributes:
                    found.append(where)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                receiver = node.args[0] if node.args else None
                if isinstance(receiver, ast.Name) and receiver.id in ("self", "trainer", "accelerator"):
                    found.append(where)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                target = node.value
                if isinstance(target, ast.Attribute) and target.attr == "__dict__":
                    key = node.slice.value if isinstance(node.slice, ast.Constant) else None
                    if key is None or key in trl_attributes:
                        found.append(where)
    assert not found, f"move these run-time interceptions of TRL into dynamic_sampling/trl_hooks.py: {found}"


def trl_private_names() -> set[str]:
    """The private names of TRL's trainer: `GRPOTrainer`'s `_x` attributes and methods, its bases' included, and
    every `self._x` their methods set."""
    names = set(dir(GRPOTrainer))
    for cls in GRPOTrainer.__mro__:
        if cls.__module__.split(".")[0] in ("trl", "transformers"):
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
            names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                      and isinstance(node.ctx, ast.Store) and getattr(node.value, "id", None) == "self"}  # fmt: skip
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_trl_uses(tree: ast.AST, names: set[str]) -> list[tuple[str, str, int]]:
    """Each read, call or write of one of `names` in `tree`, as (the enclosing function's qualified name, the name,
    the line): an attribute `x._name` on any object, or the string `"_name"` (for `getattr`, `setattr`, `__dict__`).
    `super()._name` inside a method `_name` is an override calling TRL's, not a use."""
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scope = [*scope, node.name]
        name = None
        if isinstance(node, ast.Attribute) and node.attr in names:
            receiver = node.value
            is_super = isinstance(receiver, ast.Call) and getattr(receiver.func, "id", None) == "super"
            name = None if is_super and scope and scope[-1] == node.attr else node.attr
        elif isinstance(node, ast.Constant) and node.value in names:
            name = node.value
        if name is not None:
            found.append((".".join(scope), name, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def test_only_trl_hooks_reads_or_calls_trl_private_names():
    """Every read, call or write of a private name of TRL's trainer is in `dynamic_sampling/trl_hooks.py`, each in a
    function naming the TRL layout it relies on, or recorded with why in `entries.PRIVATE_USES_OUTSIDE_HOOKS`."""
    names = trl_private_names()
    assert {"_metrics", "_calculate_rewards", "_generate", "_is_vlm", "_pending_extra_logs", "_dist"} <= names
    uses = {
        (str(path.relative_to(PACKAGE)), function, name): line
        for path, tree in package_trees()
        if path.name != "trl_hooks.py" and path.parent.name != "trl_surface"
        for function, name, line in private_trl_uses(tree, names)
    }
    unrecorded = sorted(f"{path}:{line} {function} uses {name}" for (path, function, name), line in uses.items()
                        if (path, function, name) not in PRIVATE_USES_OUTSIDE_HOOKS)  # fmt: skip
    assert not unrecorded, f"move these uses of TRL's private names into dynamic_sampling/trl_hooks.py: {unrecorded}"
    assert not set(PRIVATE_USES_OUTSIDE_HOOKS) - set(uses), "PRIVATE_USES_OUTSIDE_HOOKS records a use that is gone"


def test_the_private_name_check_sees_reads_calls_and_getattr_but_not_an_override_calling_super():
    source = textwrap.dedent('''
        class AMixin:
            def _compute_loss(self, model, inputs):
                loss = super()._compute_loss(model, inputs)
                self._metrics["train"]["x"].append(1.0)
                return loss

            def _generate_single_turn(self, *args):
                return super()._generate(*args)

        def step(trainer):
            trainer.sampler.trainer._calculate_rewards([], [], [], [])
            return getattr(trainer, "_is_vlm"), trainer._dynamic_sampler, trainer.num_generations
    ''')
    assert private_trl_uses(ast.parse(source), trl_private_names()) == [
        ("AMixin._compute_loss", "_metrics", 5),
        ("AMixin._generate_single_turn", "_generate", 9),
        ("step", "_calculate_rewards", 12),
        ("step", "_is_vlm", 13),
    ]
