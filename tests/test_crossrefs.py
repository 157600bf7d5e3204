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
    """A thing: :meth:`go`, :class:`~tritonrl.toolkit.other.Other`, :class:`Missing`."""

    def go(self, size: int) -> None:
        """Go.

        Args:
            size: how far; see :attr:`Thing.size`, :class:`Other` and :meth:`Other.run` for more.
        """

    size = 1


def helper() -> None:
    """Undocumented: :func:`helper` stays plain."""


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
    assert lines[0] == (
        '"""The fixture: [`Thing`][tritonrl.toolkit.mod.Thing], `helper` and '
        '[`other`][tritonrl.toolkit.other]."""'
    )
    assert "[`go`][tritonrl.toolkit.mod.Thing.go]" in out  # a method, from the class's scope
    assert "[`Other`][tritonrl.toolkit.other.Other], `Missing`" in out  # ~ shows the last part
    assert "[`Other.run`][tritonrl.toolkit.other.Other.run]" in out  # through the module's import
    assert "[`Thing.size`][tritonrl.toolkit.mod.Thing.size]" in out
    assert '"""Undocumented: `helper` stays plain."""' in out  # resolves, but is not documented
    assert "# a comment: `Thing` is not rendered" in out
    assert ":class:" not in out and ":func:" not in out and ":meth:" not in out
    assert counts.links == 7 and counts.plain == 4


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


def test_a_line_that_cannot_wrap_takes_the_plain_form(crossrefs, fixture_root) -> None:
    module = fixture_root["toolkit.mod"]
    counts = crossrefs.Counts()
    out = crossrefs.rewrite_source(MODULE, module, fixture_root, INVENTORY, counts, max_len=70)
    assert out.splitlines()[0] == '"""The fixture: `Thing`, `helper` and `other`."""'  # an opening line
    assert max(len(line) for line in out.splitlines()) <= 70


def test_markdown_links_full_and_unique_short_names(crossrefs) -> None:
    counts = crossrefs.Counts()
    text = "See :class:`~tritonrl.toolkit.other.Other`, :meth:`Other.run`, :func:`nowhere`."
    out = crossrefs.rewrite_markdown(text, INVENTORY, counts)
    assert out == (
        "See [`Other`][tritonrl.toolkit.other.Other], "
        "[`Other.run`][tritonrl.toolkit.other.Other.run], `nowhere`."
    )
    assert (counts.links, counts.plain) == (2, 1)
