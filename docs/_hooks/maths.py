"""mkdocs hook: the TeX of pymdownx.arithmatex (generic mode) rendered to MathML at build time.

Every browser draws MathML on its own, so the pages' maths needs no script and no network.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*'
    r"(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])"
    r"\s*</(?P=tag)>",
    re.S,
)


def render(page_html: str) -> str:
    """``page_html`` with each arithmatex span or div replaced by a ``<math>`` element."""

    def mathml(match: re.Match[str]) -> str:
        inline = match["inline"] is not None
        tex = html.unescape(match["inline"] if inline else match["display"])
        return convert(tex.strip(), display="inline" if inline else "block")

    return _MATH.sub(mathml, page_html)


def on_page_content(html: str, **kwargs: object) -> str:
    return render(html)
