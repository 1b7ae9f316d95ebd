"""The package's modules import each other without cycles, lazy imports inside functions included: a cycle makes
the import order matter and breaks as soon as one side's import moves to module level."""

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "trl_variants"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_package_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules `path` imports anywhere in its body, resolving relative imports and `from X import Y`
    where Y is a submodule."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets.add(source)
            targets |= {f"{source}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
    return {target for target in targets if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE_ROOT.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported_package_modules(path, modules) for path in paths}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, str] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_cycle_finder_sees_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b", "a"]]


def test_graph_sees_lazy_imports():
    # demo_command imports the demo only inside demo_main, after parsing its options.
    assert "trl_variants.cli.demo" in import_graph()["trl_variants.cli.demo_command"]


def test_package_has_no_import_cycles():
    assert find_cycles(import_graph()) == []
