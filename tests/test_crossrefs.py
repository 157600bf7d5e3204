"""tools/crossrefs.py: Sphinx roles become mkdocstrings cross-references, or plain code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("griffe")

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "crossrefs.py"

MODULE = '''"""The fixture: :class:`Thing`, :func:`helper` and :mod:`.other`."""

from tritonrl.toolkit.other import Other


class Thing:
    """A thing (a summary line is plain: :class:`Thing`).

    See :meth:`go`, :class:`~tritonrl.toolkit.other.Other`, :class:`Missing`.
    """

    def go(self, size: int) -> None:
        """Go.

        Args:
            size: how far; see :attr:`Thing.size`, :class:`Other` and :meth:`Other.run` for more.
        """

    size = 1


def helper() -> None:
    """Undocumented.

    Stays plain: :func:`helper`; so do :class:`Thing` and :class:`Other` on a long closing line."""


# a comment: :class:`Thing` is not rendered, so it is plain
'''

OTHER = '''"""Other."""


class Other:
    """Other."""

    def run(self) -> None:
        """Run."""
'''

INVENTORY = {
    "tritonrl.toolkit.mod.Thing",
    "tritonrl.toolkit.mod.Thing.go",
    "tritonrl.toolkit.mod.Thing.size",
    "tritonrl.toolkit.other",
    "tritonrl.toolkit.other.Other",
    "tritonrl.toolkit.other.Other.run",
}


@pytest.fixture(scope="module")
def crossrefs():
    spec = importlib.util.spec_from_file_location("tritonrl_tools_crossrefs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fixture_root(tmp_path: Path, crossrefs):
    package = tmp_path / "tritonrl" / "toolkit"
    package.mkdir(parents=True)
    (tmp_path / "tritonrl" / "__init__.py").write_text('"""Root."""\n')
    (package / "__init__.py").write_text('"""Toolkit."""\n')
    (package / "mod.py").write_text(MODULE)
    (package / "other.py").write_text(OTHER)
    return crossrefs.load_packages(tmp_path, names=("tritonrl.toolkit",))


def test_split_target(crossrefs) -> None:
    assert crossrefs.split_target("~a.b.C") == ("C", "a.b.C")
    assert crossrefs.split_target("a.b.C") == ("a.b.C", "a.b.C")
    assert crossrefs.split_target("~a.b.f()") == ("f()", "a.b.f")
    assert crossrefs.split_target(".baselines") == ("baselines", ".baselines")
    assert crossrefs.split_target("the title <a.b.C>") == ("the title", "a.b.C")


def test_roles_resolve_in_their_docstring_scope(crossrefs, fixture_root) -> None:
    counts = crossrefs.Counts()
    module = fixture_root["toolkit.mod"]
    out = crossrefs.rewrite_source(MODULE, module, fixture_root, INVENTORY, counts, max_len=110)
    lines = out.splitlines()
    assert lines[0] == '"""The fixture: `Thing`, `helper` and `other`."""'  # a summary line: plain
    assert lines[6] == '    """A thing (a summary line is plain: `Thing`).'
    assert lines[8] == (
        "    See [`go`][tritonrl.toolkit.mod.Thing.go], [`Other`][tritonrl.toolkit.other.Other], `Missing`."
    )  # a method from the class's scope; ~ shows the last part; an unknown name is plain
    assert "[`Other.run`][tritonrl.toolkit.other.Other.run]" in out  # through the module's import
    assert "[`Thing.size`][tritonrl.toolkit.mod.Thing.size]" in out
    # undocumented (helper), or links that would push a closing line past the length
    assert '    Stays plain: `helper`; so do `Thing` and `Other` on a long closing line."""' in out
    assert "# a comment: `Thing` is not rendered" in out
    assert ":class:" not in out and ":func:" not in out and ":meth:" not in out
    assert counts.links == 5 and counts.plain == 9


def test_long_lines_rewrap_into_the_paragraph(crossrefs, fixture_root) -> None:
    module = fixture_root["toolkit.mod"]
    out = crossrefs.rewrite_source(MODULE, module, fixture_root, INVENTORY, crossrefs.Counts(), max_len=90)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 90
    start = lines.index("        Args:")
    item = lines[start + 1 : lines.index('        """', start)]
    assert item[0].startswith("            size: how far;")  # the item, then its continuation at +4
    assert all(line.startswith("                ") for line in item[1:]) and len(item) >= 2
    assert " ".join(line.strip() for line in item).endswith("for more.")


def test_a_link_wider_than_the_line_takes_the_plain_form(crossrefs, fixture_root) -> None:
    module = fixture_root["toolkit.mod"]
    counts = crossrefs.Counts()
    out = crossrefs.rewrite_source(MODULE, module, fixture_root, INVENTORY, counts, max_len=50)
    lines = out.splitlines()
    assert "    See [`go`][tritonrl.toolkit.mod.Thing.go]," in lines  # wrapped, one link a line
    assert max(len(line) for line in lines if "][" in line) <= 50  # a line with a link fits
    assert "`Other`][tritonrl.toolkit.other.Other]" not in out.split("Args:")[1]  # 54 wide: plain


def test_markdown_links_full_and_unique_short_names(crossrefs) -> None:
    counts = crossrefs.Counts()
    text = "See :class:`~tritonrl.toolkit.other.Other`, :meth:`Other.run`, :func:`nowhere`."
    out = crossrefs.rewrite_markdown(text, INVENTORY, counts)
    assert out == (
        "See [`Other`][tritonrl.toolkit.other.Other], "
        "[`Other.run`][tritonrl.toolkit.other.Other.run], `nowhere`."
    )
    assert (counts.links, counts.plain) == (2, 1)


def test_the_sources_hold_no_sphinx_role() -> None:
    """A role typed into a docstring renders raw on the site: the sources use cross-references
    (``[`Name`][tritonrl.path]``) or plain code; ``python tools/crossrefs.py`` rewrites any that crept in."""
    spec = importlib.util.spec_from_file_location("crossrefs_roles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    root = SCRIPT.parent.parent
    found = [
        f"{path.relative_to(root)}:{n}"
        for folder in module.SOURCES
        for path in sorted((root / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if module.ROLE.search(line)
    ]
    assert not found, f"Sphinx roles in {len(found)} lines, first {found[:5]}"
