"""Every ``python`` code block of the documentation runs, in order, one namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

PAGES = Path(__file__).resolve().parent.parent / "docs" / "pages"
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _pages() -> list[Path]:
    return sorted(p for p in PAGES.rglob("*.md") if _BLOCK.search(p.read_text()))


def test_docs_have_runnable_pages() -> None:
    assert _pages(), f"no python blocks found under {PAGES}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(PAGES)))
def test_page_code_runs(page: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # tutorials that write files write them here
    monkeypatch.delenv("TRITONRL_DTYPE", raising=False)
    monkeypatch.delenv("TRITONRL_BACKEND", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2-core machines: one torch thread keeps timings sane
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    try:
        for i, block in enumerate(_BLOCK.findall(page.read_text())):
            code = compile(block, f"{page.name}[block {i}]", "exec")
            exec(code, namespace)
    finally:
        torch.set_num_threads(threads)
