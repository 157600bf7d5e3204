"""``--help`` of the command line and of every subcommand is plain text: no reST markup from the
docstrings the descriptions come from (``tritonrl.cli.commands.build_parser``)."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("gymnasium")

from tritonrl.cli.commands import build_parser
from tritonrl.cli.common import plain

MARKUP = ("``", ":class:", ":func:", ":meth:", ":mod:", ":data:", ":attr:")


def _helps() -> dict[str, str]:
    parser = build_parser()
    helps = {"tritonrl": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                helps[name] = sub.format_help()
    return helps


def test_every_subcommand_has_a_help() -> None:
    assert {"tritonrl", "info", "bench", "train", "fit", "export", "trade"} <= set(_helps())


@pytest.mark.parametrize("command", ["tritonrl", "info", "bench", "train", "fit", "export", "trade"])
def test_help_is_plain_text(command: str) -> None:
    text = _helps()[command]
    assert not [m for m in MARKUP if m in text], text


def test_plain_drops_the_markup() -> None:
    assert plain("``tritonrl`` runs :func:`~tritonrl.cli.main` and :class:`Preset`") == (
        "tritonrl runs main and Preset"
    )
    assert plain(":mod:`tritonrl.toolkit.forecast`") == "tritonrl.toolkit.forecast"
