"""``tritonrl export``: a run folder's trained policy as an artifact that runs without tritonrl.

The checkpoint's agent is rebuilt (on the CPU, or the GPU for an AOTInductor package), its
``agent.policy()`` exported by
[`tritonrl.toolkit.export.export_policy`][tritonrl.toolkit.export.export_policy], and the sidecar records the
checkpoint and, for a market run, the trading rules. Any failure is one ``error:`` line, exit status 2,
nothing written. See docs/pages/using-policies.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]

DESCRIPTION = (
    "Export a run folder's policy as a torch.export program, an ONNX file or an AOTInductor package."
)


FORMATS = ("pt2", "onnx", "aoti")
"""``--format``'s choices: `tritonrl.toolkit.export.FORMATS` (a test keeps them equal), here so
that building the parser imports nothing heavy (``tritonrl train`` without gymnasium must still
say so in one line)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``export`` subcommand to ``python -m tritonrl``'s parser."""
    p = subparsers.add_parser(
        "export", help="export a run folder's policy (pt2, onnx, aoti)", description=DESCRIPTION
    )
    p.add_argument("run_dir", help="a run folder of `tritonrl train` (its checkpoint.safetensors)")
    p.add_argument("--format", choices=FORMATS, default="pt2", help="the artifact's format (default: pt2)")
    p.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="the artifact (default: RUN_DIR/policy.pt2, .onnx, .aoti.pt2)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda, cuda:N or auto: where the policy is exported (an aoti package for CUDA)",
    )
    p.add_argument(
        "--outputs",
        choices=("action", "all"),
        default="action",
        help="the greedy action only (default), or also q_values / logits / value",
    )
    p.set_defaults(run=run)
    return p


def _symbols(env_id: str) -> list[str] | None:
    """The assets of a ``portfolio:SOURCE`` env in the env's order (``None``: the source cannot be
    read here, e.g. a CSV moved since training; `tritonrl trade` then takes the bars' own)."""
    from tritonrl.toolkit.bars.panel_sources import source_panel

    try:
        return list(source_panel(env_id).symbols)
    except (ValueError, OSError, ImportError):
        return None


def _metadata(ckpt: Path, state: dict[str, Any]) -> dict[str, Any]:
    """The sidecar entries of the source checkpoint: ``checkpoint`` (file, crc32, step, agent,
    env) and, for a market run, ``market`` (the rules ``tritonrl trade`` replays); for a portfolio
    run, ``portfolio`` (its env config, symbols and observation layout)."""
    meta = state["meta"]
    loop: dict[str, Any] = state["loop"] if isinstance(state.get("loop"), dict) else {}
    counters = state["agent"].get("counters", {})
    step = loop.get("step", counters.get("env_steps"))
    out: dict[str, Any] = {
        "checkpoint": {
            "file": str(ckpt),
            "crc32": f"{zlib.crc32(ckpt.read_bytes()):08x}",
            "step": step,
            "updates": counters.get("updates"),
            "agent": meta.get("agent"),
            "env": meta.get("env"),
        }
    }
    if "market_env" in meta and str(meta.get("env", "")).startswith("portfolio:"):
        from tritonrl.toolkit.envs.portfolio.env import PortfolioEnvConfig
        from tritonrl.toolkit.envs.portfolio.live import portfolio_sidecar

        config = PortfolioEnvConfig.from_dict(json.loads(meta["market_env"]))
        out["portfolio"] = portfolio_sidecar(str(meta.get("env")), config, _symbols(str(meta.get("env"))))
    elif "market_env" in meta:
        from tritonrl.toolkit.envs.market.env import MarketEnvConfig
        from tritonrl.toolkit.envs.market.live import market_sidecar

        env_config = MarketEnvConfig.from_dict(json.loads(meta["market_env"]))
        out["market"] = market_sidecar(str(meta.get("env")), env_config, None)
    return out


def run(args: argparse.Namespace) -> int:
    """``export``: the exit code (0, or 2 with one ``error:`` line and nothing written)."""
    from tritonrl.cli.common import load_run_agent, parse_device
    from tritonrl.toolkit.checkpoint import CheckpointError
    from tritonrl.toolkit.export import SUFFIXES, ExportError, export_policy, sidecar_path
    from tritonrl.toolkit.lifecycle import CHECKPOINT_NAME

    run_dir = Path(args.run_dir)
    ckpt = run_dir / CHECKPOINT_NAME
    out = Path(args.out) if args.out is not None else run_dir / f"policy{SUFFIXES[args.format]}"
    try:
        agent, state = load_run_agent(run_dir, str(parse_device(args.device)))
        metadata = _metadata(ckpt, state)
        path = export_policy(
            agent.policy(), format=args.format, path=out, outputs=args.outputs, metadata=metadata
        )
    except (CheckpointError, ExportError, ValueError, TypeError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = metadata["checkpoint"]
    print(f"{source['agent']} (step {source['step']}) exported to {path} (sidecar {sidecar_path(path).name})")
    return 0
