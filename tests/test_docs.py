"""Keeps the documentation true to the code: runnable examples run, links resolve, the README's test command is CI's.

Convention (stated in docs/index.md): a fenced block whose info string is `python runnable` is executed by this
file, each block in a fresh namespace with the working directory set to a temporary folder. Other `python` blocks
are illustrations (they need a GPU, a network or a cluster) and are only checked to parse.

It also checks that docs/troubleshooting.md quotes every error message in `trl_variants`, that
docs/config_reference.md has a row for every field the configs add, change or re-declare, that every
`trl_variants` path and benchmark module or file the docs name exists, that the README's demo table is what the
demo prints, that every figure a passage quotes from a frozen study is in its report, and that an interval quoted
from a study harness report's comparison row carries that row's arms, reading and status in its sentence. The docs are README.md, CONTRIBUTING.md, docs/*.md and the benchmark studies' READMEs.
"""

import ast
import dataclasses
import importlib
import importlib.util
import io
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# README.md, CONTRIBUTING.md, the docs pages and every benchmark study's README.
DOC_FILES = sorted([*REPO.glob("*.md"), *(REPO / "docs").glob("*.md"), *(REPO / "benchmarks").rglob("README.md")])
# The READMEs of the studies frozen under docs/results/: their links must resolve too; the code they name is that of
# the commit that ran them, not the current tree's.
FROZEN_READMES = sorted((REPO / "docs" / "results").glob("*/README.md"))
RUNNABLE_INFO = "python runnable"

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$")
# Inline links and images: [text](target) / ![alt](target); the target stops at whitespace or ')'.
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*#*\s*$")


def fenced_blocks(path: Path) -> list[tuple[str, str, int]]:
    """(info string, code, first line number) of every fenced code block in a Markdown file."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, info, start = opening["fence"], opening["info"].strip(), index + 1
        index += 1
        body = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        blocks.append((info, "\n".join(body) + "\n", start + 1))
        index += 1
    return blocks


def prose(path: Path, keep_inline_code: bool = False) -> str:
    """The file's text without its fenced code blocks and (unless kept) inline code spans: links there are text."""
    lines, kept, fence = path.read_text(encoding="utf-8").splitlines(), [], None
    for line in lines:
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening["fence"]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            kept.append(line if keep_inline_code else re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: link text kept, formatting and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose(path, keep_inline_code=True).splitlines():
        heading = HEADING.match(line)
        if heading:
            anchor = github_anchor(heading["title"])
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


RUNNABLE = [
    pytest.param(path, code, id=f"{path.relative_to(REPO)}:{line}")
    for path in DOC_FILES
    for info, code, line in fenced_blocks(path)
    if info == RUNNABLE_INFO
]


def test_docs_have_runnable_examples():
    # Guards against the convention silently matching nothing (a renamed info string would skip every block).
    assert len(RUNNABLE) >= 6, [param.id for param in RUNNABLE]
    assert any(path.name == "README.md" for path, _ in (param.values for param in RUNNABLE))


@pytest.mark.slow  # most blocks train the toy task end to end: `pytest tests/test_docs.py` runs them all
@pytest.mark.parametrize("path, code", RUNNABLE)
def test_runnable_block(path, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    # Running the reader's code as written is the point of this test; it is the repository's own documentation.
    exec(compile(code, f"{path.name} (runnable block)", "exec"), namespace)  # noqa: S102


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: str(path.relative_to(REPO)))
def test_python_blocks_parse(path):
    for info, code, line in fenced_blocks(path):
        if info.split(" ")[0] == "python":
            try:
                ast.parse(code)
            except SyntaxError as error:
                pytest.fail(f"{path.name}:{line}: python block does not parse: {error}")


@pytest.mark.parametrize("path", DOC_FILES + FROZEN_READMES, ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve(path):
    broken = []
    for match in LINK.finditer(prose(path)):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no file {linked})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no heading with anchor #{anchor} in {linked.name})")
    assert not broken, f"{path.name} has broken links: {broken}"


def literal_fragments(node) -> list[str]:
    """The literal text of a string expression: a constant, the constant parts of an f-string, or a `+` of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [part.value for part in node.values if isinstance(part, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return literal_fragments(node.left) + literal_fragments(node.right)
    return []


def normalised(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def message_expressions(tree: ast.AST):
    """(line, expression) of every user-facing error message in a module: the first argument of `raise X(...)`,
    the `allowed` text of a `require(...)` check, an entry of a `problems` list, and the text returned by a
    function whose name says it builds a problem or error message."""
    enclosing = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            for node in ast.walk(function):
                enclosing.setdefault(node, function)
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            yield node.lineno, node.exc.args[0]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "require":
            yield node.lineno, node.args[3]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "problems"
        ):
            yield node.lineno, node.args[0]
        elif isinstance(node, ast.Return) and node.value is not None and node in enclosing:
            name = enclosing[node].name
            if any(word in name for word in ("problem", "error", "message")):
                yield node.lineno, node.value


def package_error_messages() -> list[tuple[str, str]]:
    """(location, longest literal fragment) of every error message in `trl_variants`."""
    messages = []
    for path in sorted((REPO / "trl_variants").rglob("*.py")):
        for line, expression in message_expressions(ast.parse(path.read_text(encoding="utf-8"))):
            fragments = [normalised(fragment) for fragment in literal_fragments(expression)]
            fragments = [fragment for fragment in fragments if len(fragment) >= 8]
            if fragments:
                messages.append((f"{path.relative_to(REPO)}:{line}", max(fragments, key=len)))
    return messages


def test_troubleshooting_quotes_every_error_message():
    page = normalised((REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8"))
    messages = package_error_messages()
    assert len(messages) >= 30, messages  # the scan itself must keep finding the package's messages
    missing = [f"{where}: {fragment!r}" for where, fragment in messages if fragment not in page]
    assert not missing, "docs/troubleshooting.md does not quote these error messages:\n" + "\n".join(missing)


def test_troubleshooting_names_every_validated_field():
    page = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    fields = set()
    for path in (REPO / "trl_variants").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "require":
                field_name = node.args[1]
                if isinstance(field_name, ast.Constant):
                    fields.add(field_name.value)
    from trl_variants.reliability.field_ranges import FIELD_RANGES

    fields |= set(FIELD_RANGES)  # the numeric ranges, checked from one table
    assert len(fields) >= 10, fields
    assert not [name for name in fields if f"`{name}`" not in page]


def fields_added_or_changed(config_class) -> list[str]:
    """Fields `config_class` adds to `GRPOConfig`, gives another default, or declares again to document or check."""
    from trl import GRPOConfig

    base = {field.name: field for field in dataclasses.fields(GRPOConfig)}
    changed = [
        field.name
        for field in dataclasses.fields(config_class)
        if field.name not in base or field.default != base[field.name].default
    ]
    redeclared = list(vars(config_class).get("__annotations__", {}))
    return sorted(set(changed) | set(redeclared))


@pytest.mark.parametrize("config_name", ["DAPOConfig", "DrGRPOConfig"])
def test_config_reference_lists_every_added_or_changed_field(config_name):
    import trl_variants

    page = (REPO / "docs" / "config_reference.md").read_text(encoding="utf-8")
    section = page.split(f"\n## {config_name}\n", 1)[1].split("\n## ", 1)[0]
    fields = fields_added_or_changed(getattr(trl_variants, config_name))
    assert fields, config_name
    missing = [name for name in fields if f"| `{name}` |" not in section]
    assert not missing, f"docs/config_reference.md's {config_name} section has no table row for {missing}"


def readme_setup_commands() -> list[str]:
    """The shell commands of the README's "Set-up" section."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Set-up\n", 1)[1].split("\n## ", 1)[0]
    section_start = readme[: readme.index("\n## Set-up\n")].count("\n") + 1
    section_end = section_start + section.count("\n") + 1
    return [
        code.strip()
        for info, code, line in fenced_blocks(REPO / "README.md")
        if info == "bash" and section_start <= line <= section_end
    ]


def test_readme_has_exactly_two_setup_commands():
    commands = readme_setup_commands()
    assert len(commands) == 2, commands
    assert all(command.startswith("pip install torch==") for command in commands), commands


def test_readme_test_command_installs_the_real_model_and_keeps_the_editable_install():
    """The real-model tests run for a user who copies the test command, not only in CI; the real-model example's
    install line keeps the set-up command's editable install."""
    from trl_variants.smollm2 import INSTALL_COMMAND

    test_command = readme_setup_commands()[1]
    assert f" && {INSTALL_COMMAND} && " in test_command, test_command
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    cli_page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    install_lines = [line for page in (readme, cli_page) for line in page.splitlines()
                     if '".[real-model]"' in line and "pip install" in line]
    assert install_lines and all('pip install -e ".[real-model]"' in line for line in install_lines)


def test_readme_test_command_is_the_ci_command():
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    ci_commands = [line for line in ci_lines if line.startswith("pip install")]
    assert len(ci_commands) == 1, ci_commands
    assert "pytest" in ci_commands[0]
    assert readme_setup_commands()[1] == ci_commands[0]


# `trl_variants.a.b` or `trl_variants/a/b.py` in prose or code; the dotted form may end in an attribute. Of the
# benchmarks: the module a `python -m benchmarks.study.script` command runs, and a file path under benchmarks/.
MODULE_PATH = re.compile(
    r"\btrl_variants(?:\.[A-Za-z_]\w*)+|\btrl_variants(?:/\w+)+(?:\.py)?"
    r"|(?<=python -m )benchmarks(?:\.\w+)+|\bbenchmarks(?:/\w+)+\.(?:py|md|jsonl|json|png)\b"
)


def resolves(reference: str) -> bool:
    if "/" in reference:
        return (REPO / reference).exists()
    parts = reference.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            if importlib.util.find_spec(module_name) is None:
                continue
        except ModuleNotFoundError:  # a parent in the dotted path is a module, not a package
            continue
        target = importlib.import_module(module_name)
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: str(path.relative_to(REPO)))
def test_module_paths_exist(path):
    """Every module, file or attribute path the docs name under `trl_variants` exists in the package, and every
    benchmark module they run and benchmark file they name exists."""
    text = path.read_text(encoding="utf-8")
    missing = sorted({reference for reference in MODULE_PATH.findall(text) if not resolves(reference)})
    assert not missing, f"{path.name} names paths that do not exist: {missing}"


DEMO_TABLE_ROW = re.compile(
    r"^\s*(?P<label>(?:held-out|train) accuracy \(\d+ problems\))\s+(?P<before>\d\.\d\d)\s+(?P<after>\d\.\d\d)\s*$"
)
DEMO_MACHINE_LINE = re.compile(r"^\s*Printed on (?P<machine>.+)\.\s*$")


def demo_table(text: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The before/after rows of a demo report, and the machines it says printed them."""
    rows = {
        match["label"]: (match["before"], match["after"])
        for line in text.splitlines()
        if (match := DEMO_TABLE_ROW.match(line))
    }
    machines = [match["machine"] for line in text.splitlines() if (match := DEMO_MACHINE_LINE.match(line))]
    return rows, machines


@pytest.fixture(scope="module")
def demo_at_defaults(tmp_path_factory):
    """`trl-variants demo` at its defaults (seed 0, default steps), run once for the tests below."""
    from trl_variants.cli.demo import print_report, run_demo

    result = run_demo(output_dir=str(tmp_path_factory.mktemp("demo") / "demo"), out=io.StringIO())
    report = io.StringIO()
    print_report(result, report)
    return result, report.getvalue()


@pytest.mark.slow
def test_demo_learns_on_any_machine(demo_at_defaults):
    """What must hold on every CPU: the README's table shape, a clear rise in held-out accuracy, the files."""
    result, report = demo_at_defaults
    readme_rows, readme_machines = demo_table((REPO / "README.md").read_text(encoding="utf-8"))
    printed_rows, printed_machines = demo_table(report)
    assert len(readme_rows) == 2 and len(readme_machines) == 1, "README.md should quote the demo's whole table"
    assert printed_rows.keys() == readme_rows.keys()
    assert printed_machines == [result["machine"]]
    # Seeds 0-2, and torch's non-vectorised kernels standing in for another CPU, rose by 0.3 or more
    # (docs/cli.md#the-demo); a margin of half that is a clear sign of learning, not of one CPU's trajectory.
    assert result["held_out_accuracy_after"] >= result["held_out_accuracy_before"] + 0.15, result
    assert result["train_accuracy_after"] > result["train_accuracy_before"], result
    written = {path.name for path in Path(result["output_dir"]).iterdir()}
    assert {"demo_summary.json", "training_log.jsonl", "training_curves.png", "README.md", "config.json"} <= written


@pytest.mark.slow
def test_readme_demo_figures_are_what_the_named_machine_prints(demo_at_defaults):
    """The README's exact figures are one machine's float trajectory: they are compared where that machine runs."""
    result, report = demo_at_defaults
    readme_rows, readme_machines = demo_table((REPO / "README.md").read_text(encoding="utf-8"))
    if readme_machines != [result["machine"]]:
        pytest.skip(f"the README's figures were printed on {readme_machines}, this is {result['machine']!r}")
    assert demo_table(report)[0] == readme_rows


PASS_RATE_DEFINITION = "informative groups / generated groups"


@pytest.mark.parametrize("name", ["metrics.md", "migration.md", "dynamic_sampling.md"])
def test_pass_rate_is_defined_where_it_is_used_and_told_apart_from_accuracy(name):
    page = normalised((REPO / "docs" / name).read_text(encoding="utf-8"))
    assert "pass_rate" in page
    assert PASS_RATE_DEFINITION in page and "not accuracy" in page.lower()


def test_dynamic_sampling_page_says_how_to_choose_the_settings():
    page = (REPO / "docs" / "dynamic_sampling.md").read_text(encoding="utf-8")
    section = page.split("## Choosing the settings", 1)[1].split("\n## ", 1)[0]
    for setting in ("temperature", "num_generations", "generation_batch_size", "dynamic_sampling_max_rounds"):
        assert f"`{setting}`" in section
    assert "What to watch" in section


def test_migration_quotes_the_measured_step_time_cost_from_the_benchmarks():
    migration = normalised((REPO / "docs" / "migration.md").read_text(encoding="utf-8"))
    benchmarks = normalised((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8"))
    assert "benchmarks.md#overhead-against-trl" in migration
    for figure in ("1.006", "1.47x", "1.95x"):
        assert figure in migration and figure in benchmarks


def test_index_describes_the_demo_task_as_it_is():
    from trl_variants.cli.demo import DEMO_TASK

    page = normalised((REPO / "docs" / "index.md").read_text(encoding="utf-8"))
    assert DEMO_TASK["max_operand"] >= 10 and "two-digit" in page
    assert "one-digit addition prompts and" not in page


STUDY_INTERVAL = re.compile(r"\+?(-?\d+\.\d+) \[(-?\d+\.\d+), (-?\d+\.\d+)\]")
TOKEN_COUNT = re.compile(r"\b\d,\d{3}\b")
RESULTS = REPO / "docs" / "results"
STUDY2 = [RESULTS / "real_model_study" / "report.md"]
STUDY3 = [RESULTS / "real_model_study3" / "report.md", RESULTS / "real_model_study3" / "addendum.md"]
ALLOCATION_STUDY = [RESULTS / "allocation_study" / "report.md"]
STUDY_PASSAGES = {  # (frozen sources, file, start, end) of each passage that quotes a real-model study
    "study 2 in benchmarks.md": (STUDY2, "docs/benchmarks.md", "**Study 2**", "**Study 3**"),
    "study 3 in benchmarks.md": (STUDY3, "docs/benchmarks.md", "**Study 3**", "The allocation study ([frozen]"),
    "allocation study in benchmarks.md": (ALLOCATION_STUDY, "docs/benchmarks.md", "The allocation study ([frozen]",
                                          "## Dynamic sampling: carrying"),
    "allocation study in dynamic_sampling.md": (ALLOCATION_STUDY, "docs/dynamic_sampling.md",
                                                "**At exactly matched tokens**", "## Generation calls and memory"),
    "README's evidence": (STUDY3 + ALLOCATION_STUDY, "README.md", "**Evidence.**", "[What the evidence says]"),
    "study 2 in dynamic_sampling.md": (STUDY2, "docs/dynamic_sampling.md", "**Study 2**", "**Study 3**"),
    "study 3 in dynamic_sampling.md": (STUDY3, "docs/dynamic_sampling.md", "**Study 3**", "By the rules fixed"),
    "evidence.md": (STUDY2 + STUDY3 + ALLOCATION_STUDY, "docs/evidence.md", "## What it supports",
                    "How the defaults follow"),
    "allocation study in its design": (ALLOCATION_STUDY, "docs/results/allocation_study/design.md",
                                       "## On a real model", "## What the papers say"),
    "allocation study's README": (ALLOCATION_STUDY, "docs/results/allocation_study/README.md", "## Result",
                                  "| file |"),
}


@pytest.mark.parametrize("name", sorted(STUDY_PASSAGES))
def test_real_model_study_figures_quoted_in_the_docs_are_the_reports(name):
    """Every interval, token count and decision lower end a passage quotes from a frozen study is in that study's
    report (or its addendum of figures computed after it), so no figure is copied wrong or outlives its source."""
    sources, path, start, end = STUDY_PASSAGES[name]
    source = " ".join(normalised(report.read_text(encoding="utf-8")) for report in sources)
    assert "nothing is decided" not in source and "no decision:" not in source, f"{sources} is interim"
    page = normalised((REPO / path).read_text(encoding="utf-8"))
    passage = page.split(normalised(start), 1)[1].split(normalised(end), 1)[0]
    quoted = STUDY_INTERVAL.findall(passage)
    assert len(quoted) >= 2, f"{name}: the passage quotes no intervals; has it moved?"
    for value, low, high in quoted:
        assert f"{value} [{low}, {high}]" in source, f"{name} quotes {value} [{low}, {high}], which its sources lack"
    for count in TOKEN_COUNT.findall(passage):
        assert count in source, f"{name} quotes {count} tokens, which its sources lack"
    for lower_end in re.findall(r"-0\.\d{4}\b", passage):
        assert f"lower end {lower_end}" in source, lower_end


# The labels of a study harness report's comparison rows: the arms ("allocation - grpo"), the reading and the status.
READING_LABEL = re.compile(r"mean of [\d,]+(?:, [\d,]+)* and [\d,]+ tokens|at [\d,]+ tokens|at \d+ updates|"
                           r"after step \d+|completions per informative row", re.IGNORECASE)
STATUS_LABEL = re.compile(r"fixed in advance|exploratory|post hoc", re.IGNORECASE)
LABELLED_HEADER = "| comparison | arms | reading | status |"


@dataclasses.dataclass(frozen=True)
class RowLabel:
    arms: str
    reading: str
    status: str


def report_row_labels(report: str) -> dict[tuple[str, str, str], set[RowLabel]]:
    """Each interval in a report's labelled comparisons table -> the labels of the rows that give it: the row's arms,
    reading and status, the reading being the cell's own where the cell names one (a mean's sampled pass rate
    measured at one budget only). A report without such a table gives none."""
    lines = report.splitlines()
    start = next((index for index, line in enumerate(lines) if line.startswith(LABELLED_HEADER)), None)
    if start is None:
        return {}
    columns = [cell.strip() for cell in lines[start].strip().strip("|").split("|")]
    found: dict = {}
    for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]):
        cells = dict(zip(columns, (cell.strip() for cell in line.strip().strip("|").split("|")), strict=True))
        for cell in cells.values():
            for match in STUDY_INTERVAL.finditer(cell):
                own = READING_LABEL.search(cell[match.end():])
                label = RowLabel(normalised(cells["arms"]), own[0] if own else cells["reading"], cells["status"])
                found.setdefault(match.groups(), set()).add(label)
    return found


def doc_sentences(text: str) -> list[str]:
    """The sentences of a Markdown text's paragraphs, bullets and table rows, inline code and emphasis marks removed
    and links reduced to their text."""
    units, current = [], []
    for line in text.splitlines():
        starts_unit = not line.strip() or re.match(r"\s*(?:[-*] |\d+\. |\|)", line)
        if starts_unit and current:
            units.append(" ".join(current))
            current = []
        if line.strip():
            current.append(line.strip())
    units.append(" ".join(current))
    sentences = []
    for unit in units:
        unit = normalised(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", unit).replace("**", ""))
        sentences += re.split(r"(?<=[.!?])\s+(?=[A-Z(])", unit)
    return sentences


def governing_label(pattern: re.Pattern, sentence: str, start: int, end: int) -> str | None:
    """The label of `pattern`'s kind that an interval at sentence[start:end] carries: the first inside a parenthesis
    right after it (up to any interval in there), else the last before it in its sentence."""
    after = sentence[end:]
    if after.startswith(" ("):
        depth, close = 0, len(after)
        for index, character in enumerate(after[1:], 1):
            depth += {"(": 1, ")": -1}.get(character, 0)
            if depth == 0:
                close = index
                break
        inside = after[2:close]
        inside = inside[: next((match.start() for match in STUDY_INTERVAL.finditer(inside)), len(inside))]
        if own := pattern.search(inside):
            return own[0].lower()
    before = list(pattern.finditer(sentence[:start]))
    return before[-1][0].lower() if before else None


def label_problems(text: str, rows: dict) -> tuple[int, list[str]]:
    """For every interval in `text` that a labelled report row gives (`report_row_labels`), whether the labels its
    sentence gives it (`governing_label`: arms, reading, status) are those of one such row. Returns the number of
    intervals checked and a line per mismatch."""
    arm_names = sorted({arm for labels in rows.values() for label in labels for arm in label.arms.split(" - ")})
    if not arm_names:
        return 0, []
    arms = re.compile(rf"\b(?:{'|'.join(arm_names)}) - (?:{'|'.join(arm_names)})\b")
    checked, problems = 0, []
    for sentence in doc_sentences(text):
        for match in STUDY_INTERVAL.finditer(sentence):
            expected = rows.get(match.groups())
            if not expected:
                continue
            checked += 1
            found = RowLabel(*(governing_label(pattern, sentence, match.start(), match.end())
                               for pattern in (arms, READING_LABEL, STATUS_LABEL)))
            if found not in expected:
                problems.append(f"{match[0]} labelled {found} in {sentence!r}; its report rows: {sorted(expected, key=str)}")
    return checked, problems


def all_report_row_labels() -> dict:
    rows: dict = {}
    for report in sorted(RESULTS.glob("*/report.md")):
        for interval, labels in report_row_labels(report.read_text(encoding="utf-8")).items():
            rows.setdefault(interval, set()).update(labels)
    return rows


def test_every_interval_from_a_labelled_report_row_carries_that_rows_labels():
    """An interval quoted from a study harness report says, in its sentence, the arms, the reading (a budget, the mean
    of the budgets, a number of updates, the fixed step or completions per informative row) and the status (fixed in
    advance, exploratory, post hoc) of the report row it comes from: a label before it in its sentence or in a
    parenthesis right after it."""
    rows = all_report_row_labels()
    assert len(rows) >= 10, "no labelled report rows found; has the report's comparisons table changed?"
    docs = [*DOC_FILES, *(path for path in RESULTS.glob("*/*.md") if path.name != "report.md")]
    total, problems = 0, []
    for path in sorted(set(docs)):
        checked, found = label_problems(prose(path, keep_inline_code=True), rows)
        total += checked
        problems += [f"{path.relative_to(REPO)}: {problem}" for problem in found]
    assert total >= 20, f"only {total} quoted intervals checked; have the passages moved?"
    assert not problems, "\n".join(problems)


def test_a_mislabelled_interval_fails_the_label_check():
    rows = all_report_row_labels()
    right = ("Greedy accuracy, `allocation` - `grpo`, mean of 4,000 and 8,000 tokens, fixed in advance: -0.048 "
             "[-0.069, -0.028] (non-inferiority at 0.03 not shown); `allocation` - `defaults` 0.001 [-0.007, 0.010]. "
             "At 8,000 tokens alone, post hoc, `allocation` - `grpo`: -0.053 [-0.076, -0.031]; the sampled pass rate "
             "-0.052 [-0.074, -0.029] (`allocation` - `grpo` at 8,000 tokens, fixed in advance).")
    assert label_problems(right, rows) == (4, [])
    wrong = {
        "the mean called one budget": "At exactly 8,000 generated tokens its greedy accuracy trailed `GRPOTrainer`'s, "
                                      "`allocation` - `grpo`, fixed in advance: -0.048 [-0.069, -0.028].",
        "one budget called the mean": "`allocation` - `grpo`, mean of 4,000 and 8,000 tokens, post hoc: -0.053 "
                                      "[-0.076, -0.031].",
        "exploratory called fixed": "`defaults` - `grpo`, mean of 4,000 and 8,000 tokens, fixed in advance: -0.050 "
                                    "[-0.069, -0.030].",
        "arms swapped": "`allocation` - `defaults`, mean of 4,000 and 8,000 tokens, fixed in advance: -0.048 "
                        "[-0.069, -0.028].",
        "no status": "`defaults` - `grpo` at 12 updates: 0.002 [-0.016, 0.019].",
    }
    for case, passage in wrong.items():
        checked, problems = label_problems(passage, rows)
        assert checked == 1 and len(problems) == 1, case


def test_every_frozen_study_names_the_commit_that_ran_it_and_how_to_rerun_it():
    """A frozen study's README gives a `git checkout <commit> && ...` command whose commit is in the history."""
    import subprocess

    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("not a git checkout with its whole history")
    for readme in FROZEN_READMES:
        commands = re.findall(r"^git checkout ([0-9a-f]{7,40}) && \S", readme.read_text(encoding="utf-8"), re.M)
        assert commands, f"{readme.relative_to(REPO)} gives no `git checkout <commit> && ...` command"
        for commit in commands:
            known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True)
            assert known.returncode == 0, f"{readme.relative_to(REPO)} names {commit}, which is not in the history"


def test_readme_gives_the_cpu_build_of_the_pinned_torch():
    """The set-up commands' torch pin chooses a version, not a build: the README gives PyTorch's CPU-index command
    for the same version, for a machine without a GPU."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = normalised(readme.split("\n## Install\n", 1)[1].split("\n## Set-up\n", 1)[0])
    pins = {re.search(r"torch==[\w.]+", command).group() for command in readme_setup_commands()}
    assert len(pins) == 1, pins
    (pin,) = pins
    assert f"pip install {pin} --index-url https://download.pytorch.org/whl/cpu" in install
    assert "CUDA" in install and "without a GPU" in install


def test_every_figure_the_docs_show_is_drawn_by_the_figures_script(tmp_path):
    """docs/figures/ holds what `scripts/draw_figures.py` draws, and the script still draws each of them."""
    import runpy

    draw = runpy.run_path(str(REPO / "scripts" / "draw_figures.py"))
    draw["main"](["--output_dir", str(tmp_path)])
    drawn = sorted(path.name for path in tmp_path.iterdir())
    assert drawn == sorted(path.name for path in (REPO / "docs" / "figures").iterdir())
    shown = {name for path in DOC_FILES for name in re.findall(r"figures/(\w+\.png)", path.read_text(encoding="utf-8"))}
    assert shown == set(drawn), shown
    for name in drawn:
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG") and (tmp_path / name).stat().st_size > 20_000
