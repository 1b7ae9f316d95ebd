"""The package's modules, and the benchmarks', import each other without cycles, lazy imports inside functions
included: a cycle makes the import order matter and breaks as soon as one side's import moves to module level. And
every import of the package runs downward through its layers: the command line on top, then
the trainers, dynamic sampling, and the helpers everything uses (`LAYERS`)."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_ROOT = REPO / "trl_variants"

# The package's top-level modules and subpackages, lowest first; a module may import its own layer and those below.
# Prompt skipping (experimental/) uses dynamic sampling's pure rules, and the sampler calls prompt skipping: one layer.
LAYERS = (
    {"_compat", "_lazy", "machine", "log_records", "model_card", "smollm2", "variant_args", "vllm_cpu", "rewards", "toy",
     "trl_surface"},
    {"dynamic_sampling", "experimental"},
    {"reliability"},
    {"dapo", "dr_grpo"},
    {"variants"},
    {"cli"},
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_package_modules(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that `path` imports anywhere in its body, resolving relative imports and
    `from X import Y` where Y is a submodule."""
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


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
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
    # main imports the demo only inside demo_command, after parsing its options.
    assert "trl_variants.cli.demo" in import_graph()["trl_variants.cli.main"]


@pytest.mark.parametrize("root", [PACKAGE_ROOT, REPO / "benchmarks"], ids=lambda root: root.name)
def test_no_import_cycles(root):
    assert find_cycles(import_graph(root)) == []


def layer_of(module: str) -> int:
    """The index in `LAYERS` of a package module (`trl_variants.a.b` is in the layer of `a`)."""
    top = module.split(".")[1] if "." in module else None
    if top is None:  # the package's __init__ sits on top of everything it re-exports
        return len(LAYERS)
    found = [index for index, layer in enumerate(LAYERS) if top in layer]
    assert found, f"{module}: add {top!r} to a layer of LAYERS in {Path(__file__).name}"
    return found[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def test_layer_check_sees_an_upward_import():
    assert upward_imports({"trl_variants.dapo.trainer": {"trl_variants.cli.args", "trl_variants.machine"}}) == [
        "trl_variants.dapo.trainer -> trl_variants.cli.args"
    ]


def test_package_imports_run_downward_only():
    assert upward_imports(import_graph()) == []
