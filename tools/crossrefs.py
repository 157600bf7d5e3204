"""Rewrite Sphinx roles (:class:`~a.b.C`, :func:`f`, :meth:`X.m`, ...) as mkdocstrings cross-references.

A role in a docstring whose target the API reference documents becomes ``[`C`][tritonrl.a.b.C]``
(a link on the site); any other role (unresolved, undocumented, in a comment, on a summary line,
which listings such as ``tritonrl fit --list`` print) becomes plain ``` `C` ```. Names resolve as
Python would in the docstring's scope (its object, the enclosing classes with their inherited
members, the module and its imports), loaded with griffe from ``docs/_src``; the documented
objects are those of the site's ``objects.inv``. Docstring lines that grow past the line length
are rewrapped into the paragraph, or fall back to the plain form.

    python tools/crossrefs.py                  # rewrite kernels/ toolkit/ agents/ tritonrl/ docs/pages/
    python tools/crossrefs.py --check          # exit 1 if anything would change
    python tools/crossrefs.py --inventory site/objects.inv toolkit/replay
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("kernels", "toolkit", "agents", "tritonrl")
PAGES = ROOT / "docs" / "pages"
MAX_LEN = 110

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(?P<target>[^`]+)`")
_DOCSTRING_END = re.compile(r"(?:\"\"\"|''')")


@dataclass
class Counts:
    """How many roles became links and how many became plain code."""

    links: int = 0
    plain: int = 0
    unresolved: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def read_inventory(path: Path) -> set[str]:
    """The object names of a Sphinx inventory (``objects.inv``, version 2) written by mkdocstrings."""
    data = path.read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    body = zlib.decompress(data[header_end:]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines() if line.strip()}


def build_inventory(root: Path = ROOT) -> set[str]:
    """Build the site (not strict) into a temporary folder and read its ``objects.inv``."""
    with tempfile.TemporaryDirectory() as site:
        env = {**os.environ, "PYTHONPATH": str(root), "NO_MKDOCS_2_WARNING": "1"}
        cmd = [sys.executable, "-m", "mkdocs", "build", "-q", "-f", "docs/mkdocs.yml", "-d", site]
        subprocess.run(cmd, check=True, cwd=root, env=env)
        return read_inventory(Path(site) / "objects.inv")


def split_target(target: str) -> tuple[str, str]:
    """(display text, name to look up) of a role's content: ``~a.b.C`` -> (``C``, ``a.b.C``)."""
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<name>[^>]+)>", target)
    if explicit:
        return explicit["title"], explicit["name"].lstrip("~!")
    name = target.lstrip("!")
    if name.startswith("~"):
        name = name[1:]
        shown = name.rstrip("()").rsplit(".", 1)[-1] + ("()" if name.endswith("()") else "")
        return shown, name.rstrip("()")
    return name.lstrip("."), name.rstrip("()")


# --- name resolution with griffe


def load_packages(
    search_path: Path = ROOT / "docs" / "_src",
    names: Iterable[str] = ("tritonrl.kernels", "tritonrl.toolkit", "tritonrl.agents"),
):
    """The griffe module ``tritonrl`` with ``names`` loaded (from ``docs/_src``, as the site does)."""
    import griffe

    loader = griffe.GriffeLoader(search_paths=[str(search_path)])
    for name in names:
        loader.load(name)
    return loader.modules_collection["tritonrl"]


def _lookup(scope, name: str):
    try:
        return scope[name]
    except Exception:  # KeyError, an alias to an unloaded or external module, a cycle
        return None


def _documented(obj, inventory: set[str]) -> str | None:
    """The inventory name under which ``obj`` (an object or an alias to one) is documented."""
    candidates = [obj.path]
    try:
        candidates.append(obj.final_target.path if obj.is_alias else obj.canonical_path)
    except Exception:  # an alias to something outside the loaded packages
        pass
    return next((path for path in candidates if path in inventory), None)


def resolve(name: str, scope, root, inventory: set[str]) -> str | None:
    """The documented path ``name`` means inside ``scope`` (a griffe object), or None."""
    if name.startswith("."):
        module = scope.module
        package = module if module.is_package or module.is_init_module else module.parent
        dots = len(name) - len(name.lstrip("."))
        for _ in range(dots - 1):
            package = package.parent if package is not None else None
        found = _lookup(package, name.lstrip(".")) if package is not None else None
        return _documented(found, inventory) if found is not None else None
    if name.startswith("tritonrl."):
        found = _lookup(root, name.removeprefix("tritonrl."))
        return _documented(found, inventory) if found is not None else None
    node = scope
    while node is not None:
        if node.is_class or node.is_module:
            found = _lookup(node, name)
            if found is not None:
                return _documented(found, inventory)
        node = node.parent
    if name.split(".", 1)[0] in ("kernels", "toolkit", "agents"):
        found = _lookup(root, name)
        return _documented(found, inventory) if found is not None else None
    return None


def docstring_scopes(module) -> list[tuple[int, int, object]]:
    """(first line, last line, object) of every docstring in ``module``, innermost last."""
    spans: list[tuple[int, int, object]] = []

    def walk(obj) -> None:
        doc = obj.docstring
        if doc is not None and doc.lineno is not None:
            spans.append((doc.lineno, doc.endlineno or doc.lineno, obj))
        for member in obj.members.values():
            if not member.is_alias and member.parent is obj and member.filepath == obj.filepath:
                walk(member)

    walk(module)
    return sorted(spans, key=lambda s: (s[0], -s[1]))


def _scope_at(spans: list[tuple[int, int, object]], lineno: int):
    inner = None
    for first, last, obj in spans:
        if first <= lineno <= last and (inner is None or first >= inner[0]):
            inner = (first, last, obj)
    return inner


# --- rewriting


def _replace_roles(line: str, link_for, counts: Counts, plain_only: bool) -> str:
    def sub(match: re.Match[str]) -> str:
        shown, name = split_target(match["target"])
        path = None if plain_only else link_for(name)
        if path is None:
            counts.plain += 1
            counts.unresolved[name] += 0 if plain_only else 1
            return f"`{shown}`"
        counts.links += 1
        return f"[`{shown}`][{path}]"

    return ROLE.sub(sub, line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


_SECTION = re.compile(r"^\s*[A-Z]\w*(?: \w+)*:\s*$")  # Args:, Returns:, Raises:, Example:


def _continuation_indent(lines: list[str], i: int) -> int:
    """The indent a continuation of line ``i`` takes: +4 under a section's item, +2 in a list."""
    line = lines[i]
    if line.lstrip()[:2] in ("- ", "* "):
        return _indent(line) + 2
    for j in range(i - 1, -1, -1):
        if lines[j].strip() and _indent(lines[j]) < _indent(line):
            return _indent(line) + (4 if _SECTION.match(lines[j]) else 0)
    return _indent(line)


def _wrap(lines: list[str], i: int, max_len: int) -> bool:
    """Rewrap docstring line ``i`` (too long) into its paragraph in place; False if it cannot."""
    line = lines[i]
    if _DOCSTRING_END.search(line) or line.lstrip().startswith(("|", "```")):
        return False
    cut = line.rfind(" ", _indent(line) + 1, max_len + 1)
    if cut <= _indent(line):
        return False
    head, tail = line[:cut].rstrip(), line[cut + 1 :].strip()
    width = _continuation_indent(lines, i)
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    stripped = nxt.strip()
    continues = (
        stripped
        and _indent(nxt) == width
        and stripped[:2] not in ("- ", "* ")
        and not stripped.startswith(('"""', "'''", "```", "|"))
        and not _SECTION.match(nxt)
    )
    if continues:
        lines[i : i + 2] = [head, " " * width + tail + " " + stripped]
    else:
        lines[i : i + 1] = [head, " " * width + tail]
    return True


def _rewrap(lines: list[str], i: int, max_len: int) -> bool:
    """Wrap line ``i`` and the lines its overflow pushes too long; False if one cannot be."""
    while len(lines[i]) > max_len:
        if not _wrap(lines, i, max_len):
            return False
        i += 1
    return True


def rewrite_source(
    text: str, module, root, inventory: set[str], counts: Counts, max_len: int = MAX_LEN
) -> str:
    """``text`` (the source of ``module``, a griffe module) with every role rewritten."""
    spans = docstring_scopes(module) if module is not None else []
    lines = text.split("\n")
    out: list[str] = []
    i = shift = 0  # shift: lines inserted so far (the docstring spans count the original lines)
    while i < len(lines):
        line = lines[i]
        if not ROLE.search(line):
            out.append(line)
            i += 1
            continue
        span = _scope_at(spans, i + 1 - shift)
        scope = span[2] if span is not None else None

        def link_for(name: str, scope=scope) -> str | None:
            return resolve(name, scope, root, inventory) if scope is not None else None

        trial = Counts()
        summary = span is not None and span[0] == i + 1 - shift  # shown as text too (tritonrl fit --list)
        new = _replace_roles(line, link_for, trial, plain_only=scope is None or summary)
        if len(new) > max_len and len(new) > len(line):  # a line the links made too long
            wrapped = [*lines[:i], new, *lines[i + 1 :]]
            if not _rewrap(wrapped, i, max_len):
                trial = Counts()
                new = _replace_roles(line, link_for, trial, plain_only=True)
            else:
                shift += len(wrapped) - len(lines)
                lines = wrapped
                new = lines[i]
        counts.links += trial.links
        counts.plain += trial.plain
        for name, n in trial.unresolved.items():
            counts.unresolved[name] += n
        out.append(new)
        i += 1
    return "\n".join(out)


def short_names(inventory: Iterable[str]) -> Mapping[str, list[str]]:
    """Each documented name's last one and two components -> the full names ending so."""
    index: dict[str, list[str]] = defaultdict(list)
    for full in inventory:
        parts = full.split(".")
        for k in (1, 2):
            if len(parts) > k:
                index[".".join(parts[-k:])].append(full)
    return index


def rewrite_markdown(text: str, inventory: set[str], counts: Counts) -> str:
    """A page's roles: a full name, or a short one that names one documented object, links."""
    index = short_names(inventory)

    def link_for(name: str) -> str | None:
        if name in inventory:
            return name
        if not name.startswith("tritonrl.") and f"tritonrl.{name}" in inventory:
            return f"tritonrl.{name}"
        matches = index.get(name, [])
        return matches[0] if len(matches) == 1 else None

    return "\n".join(_replace_roles(line, link_for, counts, plain_only=False) for line in text.split("\n"))


def module_name(path: Path, root: Path = ROOT) -> str:
    """``toolkit/replay/buffer.py`` -> ``tritonrl.toolkit.replay.buffer``."""
    parts = list(path.resolve().relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "tritonrl" else ["tritonrl", *parts])


def _files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in paths or [*SOURCES, str(PAGES.relative_to(ROOT))]:
        path = (ROOT / p) if not Path(p).is_absolute() else Path(p)
        if path.is_dir():
            found += sorted(q for q in path.rglob("*") if q.suffix in (".py", ".md") and not q.is_symlink())
        else:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: the sources and docs/pages)")
    parser.add_argument("--inventory", type=Path, help="a built site's objects.inv (default: build one)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a role is left")
    args = parser.parse_args(argv)
    inventory = read_inventory(args.inventory) if args.inventory else build_inventory()
    root = load_packages()
    counts, changed = Counts(), []
    for path in _files(args.paths):
        text = path.read_text()
        if not ROLE.search(text):
            continue
        if path.suffix == ".md":
            new = rewrite_markdown(text, inventory, counts)
        else:
            name = module_name(path)
            module = root if name == "tritonrl" else _lookup(root, name.removeprefix("tritonrl."))
            if module is not None and os.path.realpath(module.filepath) != str(path.resolve()):
                module = None  # a name griffe found elsewhere (e.g. tritonrl/ itself)
            new = rewrite_source(text, module, root, inventory, counts)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    print(f"{len(changed)} files, {counts.links} links, {counts.plain} plain", file=sys.stderr)
    top = sorted(counts.unresolved.items(), key=lambda kv: -kv[1])[:15]
    if top:
        print("unresolved or undocumented: " + ", ".join(f"{n} ({k})" for n, k in top), file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
