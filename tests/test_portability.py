"""Exact float comparisons only where the same computation runs twice.

BLAS libraries pick kernels by shape and by instruction set, so two code paths that multiply
different shapes (a sequence encoded at once vs one step at a time) round differently on some
machines (an AVX-512 Xeon) and agree bit for bit on others. An exact ``assert_close`` must say
why the two sides are the same computation, with a ``# exact:`` comment on its line or the
line above; everything else states a tolerance. ``make test-portability`` reruns the
numerics-sensitive files under MKL's other GEMM code path.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def exact_comparisons_without_reason(source: str) -> list[int]:
    """Line numbers of ``assert_close(..., rtol=0, atol=0)`` calls with no ``# exact:`` comment."""
    lines = source.splitlines()
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        kw = {k.arg: k.value for k in node.keywords}
        if name != "assert_close" or not all(k in kw and _is_zero(kw[k]) for k in ("rtol", "atol")):
            continue
        span = lines[max(node.lineno - 2, 0) : (node.end_lineno or node.lineno)]
        if not any("# exact:" in line for line in span):
            bad.append(node.lineno)
    return bad


def test_the_scan_finds_an_unexplained_exact_comparison() -> None:
    src = (
        "import torch\ntorch.testing.assert_close(a, b, rtol=0, atol=0)\nassert_close(a, b, atol=0, rtol=0)\n"
    )
    assert exact_comparisons_without_reason(src) == [2, 3]
    ok = (
        "# exact: a copy\nassert_close(a, b, rtol=0, atol=0)\n"
        "assert_close(a, b, rtol=0, atol=0)  # exact: same\n"
    )
    assert exact_comparisons_without_reason(ok) == []
    assert exact_comparisons_without_reason("assert_close(a, b, rtol=0, atol=1e-6)\n") == []


def test_every_exact_comparison_says_why() -> None:
    found = {
        str(p.relative_to(TESTS)): lines
        for p in sorted(TESTS.rglob("*.py"))
        if (lines := exact_comparisons_without_reason(p.read_text()))
    }
    assert not found, (
        f"exact float comparisons without a '# exact:' reason (file: lines): {found}; state a "
        "tolerance and why, unless the same computation runs twice"
    )
