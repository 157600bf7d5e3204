"""The layout's rules, read from the source (CONTRIBUTING.md, "Layers").

- import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) hold, and break when a
  forbidden import is added (so the check cannot pass vacuously);
- no import cycle between modules, function-level imports included;
- nothing in ``toolkit/`` or ``tritonrl/cli/`` reads a private attribute of an agent;
- ``tritonrl/cli`` is the one package that imports ``agents`` and ``toolkit`` both: no module of
  ``toolkit/`` imports ``agents`` or ``tritonrl.cli``; inside ``toolkit/`` the core modules import
  no toolkit subpackage;
- sizes: no file over 800 lines, no function over 100 lines outside ``kernels/``.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "kernels": "tritonrl.kernels",
    "toolkit": "tritonrl.toolkit",
    "agents": "tritonrl.agents",
    "tritonrl/cli": "tritonrl.cli",
}
MAX_FILE_LINES, MAX_FUNCTION_LINES = 800, 100
CHECKED_FOR_SIZE = ("toolkit", "agents", "tritonrl", "tools", "benchmarks", "tests", "docs")


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((pkg, *parts)).removesuffix(".__init__")
            mods[name] = path
    return mods


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (imports for the type checker only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield child
                yield from _runtime_nodes(child)
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports at run time anywhere in its body (function-level too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(_graph()) == []


def test_toolkit_layers() -> None:
    graph = _graph()
    subpackages = {"bars", "envs", "replay", "training", "forecast", "backtest"}
    bad = []
    for mod, deps in graph.items():
        parts = mod.split(".")
        if parts[1] != "toolkit":
            continue
        in_core = len(parts) == 3 and parts[2] not in subpackages
        for dep in deps:
            dparts = dep.split(".")
            if dparts[1] in ("agents", "cli"):
                bad.append(f"{mod} -> {dep} (toolkit imports no agent and not the command line)")
            if in_core and dparts[1] == "toolkit" and len(dparts) > 2 and dparts[2] in subpackages:
                bad.append(f"{mod} -> {dep} (a core module imports no toolkit subpackage)")
    assert not bad, bad


class _PrivateAgentAccess(ast.NodeVisitor):
    """``<...agent...>._name`` reads (``agent._q_of``, ``self.agent._x``), dunders allowed."""

    def __init__(self) -> None:
        self.hits: list[int] = []

    def visit_Attribute(self, node: ast.Attribute) -> None:
        owner = node.value
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if node.attr.startswith("_") and not node.attr.startswith("__") and "agent" in owner_name.lower():
            self.hits.append(node.lineno)
        self.generic_visit(node)


def _private_agent_reads(source: str) -> list[int]:
    v = _PrivateAgentAccess()
    v.visit(ast.parse(source))
    return v.hits


def test_the_private_access_scan_finds_one() -> None:
    assert _private_agent_reads("q = self.agent._q_of(x)\ny = agent.updates\nz = agent.__class__\n") == [1]


def test_toolkit_reads_no_private_attribute_of_an_agent() -> None:
    found = {
        str(p.relative_to(ROOT)): hits
        for folder in ("toolkit", "tritonrl/cli")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (hits := _private_agent_reads(p.read_text()))
    }
    assert not found, f"private agent attributes read in toolkit/ or tritonrl/cli/ (file: lines): {found}"


def test_sizes_outside_kernels() -> None:
    big, long = [], []
    for folder in CHECKED_FOR_SIZE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" in path.parts or "site" in path.parts or ".peers" in path.parts:
                continue  # .peers: other projects' files, fetched unmodified (benchmarks/fetch-*.sh)
            src = path.read_text()
            rel = str(path.relative_to(ROOT))
            if (n := src.count("\n")) > MAX_FILE_LINES:
                big.append(f"{rel} ({n} lines)")
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        long.append(f"{rel}::{node.name} ({length} lines)")
    assert not big and not long, (
        f"files over {MAX_FILE_LINES} lines: {big}; functions over {MAX_FUNCTION_LINES}: {long}"
    )


MAX_MODULE_DOC_LINES, MAX_DOC_SHARE = 8, 0.15


def _docstring_lines(tree: ast.Module) -> tuple[int, int]:
    """(module docstring lines, all docstring lines) of a parsed module."""
    module = total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    n = (first.end_lineno or first.lineno) - first.lineno + 1
                    total += n
                    module = n if node is tree else module
    return module, total


def test_docstrings_are_lean() -> None:
    """CONTRIBUTING, "Size and docstrings": a module docstring says what lives there in at most
    8 lines, and docstrings are at most 15% of the package's lines (the rest lives in the docs)."""
    long, lines, doc = [], 0, 0
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            src = path.read_text()
            module, total = _docstring_lines(ast.parse(src))
            lines, doc = lines + src.count("\n"), doc + total
            if module > MAX_MODULE_DOC_LINES:
                long.append(f"{path.relative_to(ROOT)} ({module} lines)")
    assert not long, f"module docstrings over {MAX_MODULE_DOC_LINES} lines: {long}"
    assert doc <= MAX_DOC_SHARE * lines, f"docstrings are {doc / lines:.1%} of {lines} lines"


def test_the_docstring_count_sees_a_long_one() -> None:
    tree = ast.parse('"""One.\n\nTwo.\n"""\n\n\ndef f():\n    """F."""\n')
    assert _docstring_lines(tree) == (4, 5)


def _lint_tool():
    spec = importlib.util.spec_from_file_location("lint_imports", ROOT / "tools" / "lint_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_linter = pytest.mark.skipif(
    not Path(sys.executable).with_name("lint-imports").exists(), reason="import-linter is not installed"
)


@needs_linter
def test_import_linter_contracts_hold_and_can_break(tmp_path: Path) -> None:
    tool = _lint_tool()
    tool.stage(tmp_path / "ok")
    assert tool.lint(tmp_path / "ok", quiet=True) == 0
    # one forbidden import, added to one module, breaks the contracts
    forbidden = [
        ("kernels/validate.py", "tritonrl.toolkit.precision"),
        ("toolkit/precision.py", "tritonrl.agents.nets"),
        ("toolkit/training/loop.py", "tritonrl.cli.registry"),
        ("agents/dqn/presets.py", "tritonrl.toolkit.training.offpolicy"),
        ("agents/nets/__init__.py", "tritonrl.cli"),
    ]
    for i, (module, target) in enumerate(forbidden):
        bad = tmp_path / f"bad{i}"
        shutil.copytree(tmp_path / "ok", bad)
        victim = bad / "tritonrl" / module
        victim.write_text(victim.read_text() + f"\nimport {target}  # noqa\n")
        assert tool.lint(bad, quiet=True) == 1, f"{module} -> {target} kept every contract"
