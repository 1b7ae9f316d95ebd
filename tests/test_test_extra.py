"""The `test` extra covers what the README's test command's suite imports: every module imported unconditionally at
the top of a test, benchmark or package module comes from the standard library, this repository, or a distribution
that the package's requirements and its `test` extra bring in (with their own requirements). A module imported only
inside a function, a `try` or `pytest.importorskip` is optional and not counted.

This catches on any machine what only a fresh environment would otherwise show: a test that passes here because an
earlier install left a package behind (.ci/run also runs the README's command in an environment it makes anew)."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "benchmarks", "trl_variants")
LOCAL = {"tests", "benchmarks", "trl_variants", "conftest"}
# Folders whose tests are skipped where their optional package is absent (the `deepspeed` and `vllm` markers), and
# whose launched scripts may therefore import it.
OPTIONAL = {"tests/deepspeed": "deepspeed", "tests/vllm": "vllm"}


def top_level_imports(path: Path) -> set[str]:
    """The top-level module names `path` imports unconditionally at module level (not in a function, `try` or `if`)."""
    names = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def requirement_closure(requirements: list[str], extras: set[str] = frozenset()) -> set[str]:
    """The normalised names of the distributions `requirements` bring in, their own requirements included (markers
    evaluated for this interpreter, the named `extras` of the root requirements only)."""
    seen, pending = set(), [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = canonical(requirement.name)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            pending.extend(Requirement(text) for text in importlib.metadata.requires(requirement.name) or ())
        except importlib.metadata.PackageNotFoundError:
            pass  # not installed here: then its module cannot be found below either, and the import fails the test
    return seen


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_unconditional_import_comes_from_the_test_extra_or_the_requirements():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    covered = requirement_closure([*project["dependencies"], *project["optional-dependencies"]["test"]])
    distributions = importlib.metadata.packages_distributions()
    problems = []
    for folder in SCANNED:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            optional = {module for prefix, module in OPTIONAL.items() if path.is_relative_to(REPO_ROOT / prefix)}
            for module in sorted(top_level_imports(path) - LOCAL - optional - set(sys.stdlib_module_names)):
                owners = {canonical(name) for name in distributions.get(module, ())}
                if not owners & covered:
                    problems.append(f"{path.relative_to(REPO_ROOT)} imports {module} ({sorted(owners) or 'not installed'})")
    assert not problems, "not brought in by the requirements or the test extra:\n" + "\n".join(problems)


def test_the_check_sees_an_import_outside_the_extra(tmp_path):
    """The scan counts a module-level import, and the closure leaves out what no requirement names."""
    module = tmp_path / "uses_deepspeed.py"
    module.write_text("import os\nfrom deepspeed.runtime import zero\n\ndef f():\n    import vllm\n")
    assert top_level_imports(module) == {"os", "deepspeed"}
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    covered = requirement_closure([*project["dependencies"], *project["optional-dependencies"]["test"]])
    assert "deepspeed" not in covered and "vllm" not in covered
    assert {"trl", "torch", "pytest", "pyyaml"} <= covered
