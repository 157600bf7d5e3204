"""``tritonrl`` (or ``python -m tritonrl``): the command line.

Subcommands ``info`` and ``bench`` live here; ``train``, ``fit``, ``backtest``, ``evaluate``, ``export``
and ``trade`` come from their own modules. See docs/pages/training.md, "Command line".
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import torch

__all__ = ["build_parser", "info", "main"]


def _devices() -> list[torch.device]:
    devices = [torch.device("cpu")]
    if torch.cuda.is_available():
        devices += [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return devices


def info() -> str:
    """A report of versions, devices with their training dtype, and each op's implementation."""
    from tritonrl import kernels
    from tritonrl.kernels.backend import interpreting, triton_available
    from tritonrl.toolkit.precision import explain

    kernels.load_all()
    lines = [f"torch {torch.__version__}"]
    if triton_available():
        import triton

        lines.append(f"triton {triton.__version__}" + (" (interpreter)" if interpreting() else ""))
    else:
        lines.append("triton not installed: every op runs its torch reference")
    lines.append("devices:")
    for dev in _devices():
        try:
            d = explain(dev)
            cap = "" if d.capability is None else f", capability {d.capability[0]}.{d.capability[1]}"
            lines.append(
                f"  {d.device} ({d.name}{cap}): {str(d.dtype).removeprefix('torch.')} [{d.source}] {d.reason}"
            )
        except Exception as exc:  # a forced dtype the device cannot do: report, don't crash
            lines.append(f"  {dev}: error: {exc}")
        for name, op in sorted(kernels.registry().items()):
            try:
                sel = op.select(dev)
                lines.append(f"    op {name}: {sel.backend} ({sel.reason})")
            except Exception as exc:
                lines.append(f"    op {name}: error: {exc}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line, ``error: ...`` on stderr, exit 2; subparsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser(prog: str = "tritonrl") -> argparse.ArgumentParser:
    """The command line's parser, every subcommand added (``prog``: the name its messages use)."""
    from tritonrl.cli.common import plain

    parser = _Parser(prog=prog, description=plain(__doc__.splitlines()[0]))
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, devices, training dtypes and kernel paths")
    p_bench = sub.add_parser("bench", help="run the benchmarks under benchmarks/ as one table")
    p_bench.add_argument("names", nargs="*", help="benchmark file stems (default: all)")
    p_bench.add_argument("--dir", default="benchmarks", help="benchmark folder")
    p_bench.add_argument("--quick", action="store_true", help="fewer cases, for smoke runs")
    p_bench.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write every row with its config, versions, device, commit and date as JSON",
    )
    p_bench.add_argument(
        "--plot",
        metavar="DIR",
        default=None,
        help="also draw one PNG per benchmark (ratios against the baseline) into DIR (needs matplotlib)",
    )
    _register_extra(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tritonrl``; the exit code (2 after a one-line ``error: ...``)."""
    prog = "tritonrl" if os.path.basename(sys.argv[0]) == "tritonrl" else "python -m tritonrl"
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a mistake already reported by _Parser.error
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    if args.command == "info":
        print(info())
        return 0
    if args.command == "bench":
        return _bench(Path(args.dir), args.names, quick=args.quick, json_path=args.json, plot_dir=args.plot)
    return args.run(args)


def _bench(
    folder: Path,
    names: Sequence[str],
    *,
    quick: bool,
    json_path: str | None = None,
    plot_dir: str | None = None,
) -> int:
    """``bench``: the runner `tritonrl.cli.bench.main` over the benchmark files in
    ``folder`` (``json_path``, ``plot_dir``: ``--json``, ``--plot``); the exit code. A missing folder
    (an install without a checkout) is one ``error:`` line and status 2."""
    if not folder.is_dir():
        print(
            f"error: no benchmark folder at {folder.resolve()}: the benchmarks live in a checkout of the "
            "repository, not in the installed package (run from the checkout's root, or pass --dir)",
            file=sys.stderr,
        )
        return 2
    from tritonrl.cli.bench import main as run_benchmarks

    return run_benchmarks(folder, names, quick=quick, json_path=json_path, plot_dir=plot_dir)


def _register_extra(sub: argparse._SubParsersAction) -> None:
    """Subcommands added by later modules (``train``, ``fit``, ``backtest``, ``evaluate``, ``export``,
    ``trade``); each sets ``run``
    on its parser."""
    modules = ("train", "fit", "backtest", "evaluate", "export", "trade")
    for module in (f"tritonrl.cli.{name}" for name in modules):
        try:
            add_parser = importlib.import_module(module).add_parser
        except ImportError as exc:
            if exc.name != module:
                raise
            continue
        add_parser(sub)


if __name__ == "__main__":
    sys.exit(main())
