"""Finding an entry's source in a TRL or transformers folder without importing it, and fingerprinting it.

A fingerprint is a hash of the source's syntax tree: comments, blank lines and formatting do not change it, code
and docstrings do. The tree is written out field by field, leaving out empty fields, so the Python versions the
package supports (whose trees differ only in fields new syntax fills) give the same hash for the same code.
"""

import ast
import copy
import hashlib
import importlib.util
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, PathDistribution, version
from pathlib import Path

from .entries import CLASS_CHAINS, SurfaceEntry

LIBRARIES = ("trl", "transformers")


@dataclass(frozen=True)
class Library:
    """An importable package folder (`root`, e.g. `.../site-packages/trl`) and its version."""

    name: str
    root: Path
    version: str


def library_version(root: Path) -> str:
    """The version of the package in `root`: from its `.dist-info` beside it, else its `__version__` line."""
    for dist_info in sorted(root.parent.glob(f"{root.name}-*.dist-info")):
        if PathDistribution(dist_info).version:
            return PathDistribution(dist_info).version
    match = re.search(r"^__version__\s*=\s*[\"']([^\"']+)", (root / "__init__.py").read_text(encoding="utf-8"), re.M)
    return match.group(1) if match else "unknown"


def installed_library(name: str) -> Library | None:
    """The package `name` as this Python would import it (found, not imported)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    try:  # an editable install keeps its metadata away from the package folder
        return Library(name, root, version(name))
    except PackageNotFoundError:
        return Library(name, root, library_version(root))


def library_in(name: str, folder: str | Path) -> Library | None:
    """The package `name` in `folder` (a folder holding it, as `pip install --target` makes, or the package
    folder itself), or `None`."""
    folder = Path(folder)
    for root in (folder / name, folder):
        if root.name == name and (root / "__init__.py").is_file():
            return Library(name, root, library_version(root))
    return None


@dataclass(frozen=True)
class Found:
    """An entry's definition: `location` (`path:qualname`), its fingerprint and its source text for a diff."""

    location: str
    fingerprint: str
    text: str


@lru_cache(maxsize=None)
def _parsed(path: Path) -> tuple[list[str], ast.Module] | None:
    if not path.is_file():
        return None
    source = path.read_text(encoding="utf-8")
    return source.splitlines(), ast.parse(source)


def _statements(body: list[ast.stmt]):
    """`body`'s statements, those inside `if`/`try` blocks included (where modules put guarded imports)."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.Try):
            for block in (statement.body, statement.orelse, getattr(statement, "finalbody", [])):
                yield from _statements(block)
            for handler in getattr(statement, "handlers", []):
                yield from _statements(handler.body)


def _binding(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The last statement of `body` that binds `name` (a def, a class, an assignment or an import of it)."""
    found = None
    for statement in _statements(body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and statement.name == name:
            found = statement
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            aliases = [alias for alias in statement.names if (alias.asname or alias.name.split(".")[0]) == name]
            if aliases:
                found = copy.copy(statement)
                found.names = aliases
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                found = statement
    return found


def canonical(node) -> str:
    """The syntax tree under `node` as text, without positions and without empty fields."""
    if isinstance(node, ast.AST):
        fields = (
            f"{field}={canonical(value)}"
            for field, value in ast.iter_fields(node)
            if value is not None and not (isinstance(value, list) and not value)
        )
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(canonical(item) for item in node)}]"
    return repr(node)


def _text(lines: list[str], node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and hasattr(node, "end_lineno"):
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        return textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno])) + "\n"
    return ast.unparse(node) + "\n"


def find_at(libraries: dict[str, Library], location: str, header_only: bool = False) -> Found | None:
    """The definition at `location` (`path:Name` or `path:Class.member`), or `None` where it is absent."""
    path, _, qualname = location.partition(":")
    library = libraries.get(path.split("/")[0])
    parsed = library and _parsed(library.root.parent / path)
    if not parsed:
        return None
    lines, node = parsed
    for part in qualname.split("."):
        node = _binding(getattr(node, "body", []), part)
        if node is None:
            return None
    if header_only and isinstance(node, ast.ClassDef):
        node = copy.copy(node)
        node.body = [item for item in node.body if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
        text = ast.unparse(node) + "\n"
    else:
        text = _text(lines, node)
    return Found(location, hashlib.sha256(canonical(node).encode()).hexdigest()[:16], text)


def locate(entry: SurfaceEntry, libraries: dict[str, Library]) -> Found | None:
    """Where `entry` is defined in `libraries`: its `source`, or for `Class.method` the first class of the
    class's chain that defines the method."""
    if entry.source is not None:
        return find_at(libraries, entry.source, entry.header_only)
    class_name, _, member = entry.name.partition(".")
    for link in CLASS_CHAINS[class_name]:
        found = find_at(libraries, f"{link}.{member}")
        if found is not None:
            return found
    return None
