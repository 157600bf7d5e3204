"""Export a policy module so that it runs without tritonrl: ``torch.export``, ONNX, AOTInductor.

[`export_policy`][tritonrl.toolkit.export.export_policy] traces a
[`tritonrl.toolkit.policy.PolicyModule`][tritonrl.toolkit.policy.PolicyModule] once (kernel ops as torch
references) and writes ``pt2``, ``onnx`` or ``aoti`` with a JSON sidecar;
[`load_exported`][tritonrl.toolkit.export.load_exported] reads any back. A core module. Guide:
docs/pages/using-policies.md.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import os
import platform
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tritonrl.kernels.backend import references_only
from tritonrl.toolkit.policy import PolicyModule
from tritonrl.toolkit.runfolder import atomic_write_text

__all__ = [
    "EXPORT_EXTRA",
    "FORMATS",
    "ONNX_OPSET",
    "SIDECAR_FORMAT",
    "SUFFIXES",
    "ExportError",
    "ExportedPolicy",
    "exported_program",
    "export_policy",
    "foreign_ops",
    "load_exported",
    "sidecar_path",
]

FORMATS = ("pt2", "onnx", "aoti")
"""The artifact formats of `export_policy`."""
ONNX_OPSET = 18
"""The ONNX opset of ``onnx`` artifacts (onnxruntime 1.16 and later run it)."""
SIDECAR_FORMAT = "tritonrl-policy"
"""The ``format`` entry of every sidecar (its ``version`` is 1)."""
EXPORT_EXTRA = "pip install 'tritonrl[export]'"
SUFFIXES = {"pt2": ".pt2", "onnx": ".onnx", "aoti": ".aoti.pt2"}
"""The default file ending of each format (``pt2`` and ``aoti`` artifacts must end in ``.pt2``:
torch's loaders take no other name)."""
_ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")
# what an exported graph may call: aten ops (and the few torch.export adds around them)
_STANDARD_NAMESPACES = frozenset(("aten", "prims"))
# ONNX node domains of the standard operator sets
_ONNX_DOMAINS = frozenset(("", "ai.onnx", "ai.onnx.ml"))


class ExportError(ValueError):
    """A policy or request that cannot be exported; nothing is written."""


def sidecar_path(artifact: str | os.PathLike) -> Path:
    """The sidecar of ``artifact``: the same path with ``.json`` appended."""
    p = Path(artifact)
    return p.with_name(p.name + ".json")


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; formats: {', '.join(FORMATS)}")
    if format == "onnx":
        for name in _ONNX_MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                raise ExportError(
                    f"format 'onnx' needs the export extra ({', '.join(_ONNX_MODULES)}; {name} is not "
                    f"installed): {EXPORT_EXTRA}"
                ) from None


class _Exportable(nn.Module):
    """What is traced: the greedy action (and state), or every output as a flat tuple."""

    def __init__(self, policy: PolicyModule, every: bool) -> None:
        super().__init__()
        self.policy = policy
        self.every = every

    def forward(self, obs: torch.Tensor, *state: torch.Tensor) -> Any:
        if self.every:
            return tuple(self.policy.outputs(obs, *state).values())
        return self.policy.act(obs, *state)


def _names(policy: PolicyModule, every: bool) -> tuple[list[str], list[str]]:
    """The inputs' and outputs' names of the traced graph."""
    states = [name for name, _, _ in policy.state_spec()]
    inputs = ["obs", *states]
    outputs = ["action", *(policy.extra_outputs if every else ()), *(f"next_{s}" for s in states)]
    return inputs, outputs


def foreign_ops(graph_module: torch.fx.GraphModule) -> list[str]:
    """The ops of ``graph_module`` that are not standard aten ops (custom ops, Python callables)."""
    bad: list[str] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            if target.namespace not in _STANDARD_NAMESPACES:
                bad.append(str(target))
        elif getattr(target, "__module__", "") not in ("_operator", "operator") and target is not getattr:
            bad.append(getattr(target, "__qualname__", repr(target)))
    return sorted(set(bad))


def exported_program(
    policy: PolicyModule, example_obs: torch.Tensor | None = None, *, outputs: str = "action"
) -> torch.export.ExportedProgram:
    """``policy`` (f32, eval mode) traced by ``torch.export`` with a dynamic batch, kernel ops as torch
    references.

    Args:
        example_obs: at least 2 observations (default
            [`PolicyModule.example_obs`][tritonrl.toolkit.policy.PolicyModule.example_obs]).
        outputs: ``"action"`` (``forward``'s outputs) or ``"all"``
            ([`PolicyModule.outputs`][tritonrl.toolkit.policy.PolicyModule.outputs]).

    Raises:
        ExportError: weights not f32, a batch below 2, a graph that does not trace or holds a non-standard op.
    """
    if not isinstance(policy, PolicyModule):
        raise ExportError(f"export takes a PolicyModule (agent.policy()), got {type(policy).__name__}")
    if outputs not in ("action", "all"):
        raise ExportError(f"outputs must be 'action' or 'all', got {outputs!r}")
    wide = [f"{n} ({t.dtype})" for n, t in policy.named_parameters() if t.dtype != torch.float32]
    if wide:
        raise ExportError(f"policy weights must be f32 (agent.policy() casts them): {wide[0]}")
    obs = policy.example_obs() if example_obs is None else example_obs
    if obs.dim() != len(policy.obs_shape) + 1 or obs.shape[0] < 2:
        raise ExportError(
            f"example_obs must be a batch of at least 2 observations [B, *{policy.obs_shape}], "
            f"got {tuple(obs.shape)}"
        )
    policy.eval()
    state = policy.initial_state(obs.shape[0])
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    # forward(obs, *state): the state is one tuple (absent when empty)
    dynamic = ({0: batch}, tuple({0: batch} for _ in state)) if state else ({0: batch},)
    module = _Exportable(policy, outputs == "all").eval()
    try:
        with torch.no_grad(), references_only():
            ep = torch.export.export(module, (obs, *state), dynamic_shapes=dynamic)
    except Exception as exc:  # torch.export's many error types: one line naming the policy and why
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ExportError(
            f"{type(policy).__name__} cannot be exported: {type(exc).__name__}: {first}"
        ) from exc
    bad = foreign_ops(ep.graph_module)
    if bad:
        raise ExportError(
            f"{type(policy).__name__} cannot be exported: its graph calls {bad[0]}, which is not a "
            "standard aten op (an artifact must run without tritonrl)"
        )
    return ep


def _versions(format: str) -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        out["tritonrl"] = importlib.metadata.version("tritonrl")
    except importlib.metadata.PackageNotFoundError:  # a checkout on PYTHONPATH
        out["tritonrl"] = "source"
    if format == "onnx":
        for name in _ONNX_MODULES:
            out[name] = str(getattr(importlib.import_module(name), "__version__", "unknown"))
    return out


def _check_onnx(model: Any) -> None:
    """Raise `ExportError` unless every node of ``model`` is in a standard ONNX domain."""
    domains = {node.domain for node in model.graph.node}
    for fn in model.functions:
        domains |= {node.domain for node in fn.node}
    local = {fn.domain for fn in model.functions}
    bad = sorted(domains - _ONNX_DOMAINS - local)
    if bad:
        raise ExportError(f"the ONNX graph holds ops of domain {bad[0]!r}, not a standard opset")


def _write(
    format: str, ep: torch.export.ExportedProgram, tmp: Path, names: tuple[list[str], list[str]]
) -> None:
    if format == "pt2":
        torch.export.save(ep, str(tmp))
    elif format == "aoti":
        torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp))
    else:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's progress lines and deprecation notices
            program = torch.onnx.export(
                ep,
                dynamo=True,
                opset_version=ONNX_OPSET,
                input_names=names[0],
                output_names=names[1],
                verbose=False,
            )
        assert program is not None  # the dynamo exporter returns its program
        _check_onnx(program.model_proto)
        program.save(str(tmp))


def export_policy(
    policy: PolicyModule,
    example_obs: torch.Tensor | None = None,
    *,
    format: str = "pt2",
    path: str | os.PathLike | None = None,
    outputs: str = "action",
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``policy`` (f32, ``agent.policy()``) as a ``format`` artifact at ``path`` with its sidecar
    ``<path>.json``.

    Args:
        example_obs: a batch of at least 2 observations to trace with (default: drawn from the space).
        format: ``"pt2"``, ``"onnx"`` or ``"aoti"``.
        path: the artifact (default ``policy.pt2`` / ``policy.onnx`` / ``policy.aoti.pt2`` here).
        outputs: ``"action"`` (and a recurrent policy's next state) or ``"all"`` (also ``q_values``,
            ``logits``, ``value``).
        metadata: more sidecar entries.

    Returns:
        the artifact's path.

    Raises:
        ExportError: an unknown format, a missing extra, a policy that cannot be exported; nothing is written.
        OSError: the folder cannot be written (nothing is left half-written).
    """
    _check_format(format)
    out = Path(path) if path is not None else Path(f"policy{SUFFIXES[format]}")
    if format != "onnx" and out.suffix != ".pt2":
        raise ExportError(f"a {format} artifact's name must end in .pt2 (torch loads no other): {out.name}")
    ep = exported_program(policy, example_obs, outputs=outputs)
    names = _names(policy, outputs == "all")
    out.parent.mkdir(parents=True, exist_ok=True)
    # written under its own name in a temporary folder beside it (an AOTInductor package names
    # its inner folder after the file), moved into place once complete
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write(format, ep, tmp_dir / out.name, names)
        os.replace(tmp_dir / out.name, out)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    spec = policy.spec()
    doc = {
        "format": SIDECAR_FORMAT,
        "version": 1,
        "artifact": out.name,
        "artifact_format": format,
        "device": str(policy.device),
        **spec,
        "inputs": names[0],
        "outputs": names[1],
        "dynamic_batch": True,
        "onnx_opset": ONNX_OPSET if format == "onnx" else None,
        "versions": _versions(format),
        **dict(metadata or {}),
    }
    atomic_write_text(sidecar_path(out), json.dumps(doc, indent=1) + "\n")
    return out


class ExportedPolicy:
    """A loaded artifact: ``policy(obs, *state)`` returns the action (or with the next state) as tensors.

    Attributes:
        sidecar: the sidecar's entries.
        format: ``"pt2"``, ``"onnx"`` or ``"aoti"``.
    """

    def __init__(self, path: Path, sidecar: dict[str, Any], runner: Any) -> None:
        self.path, self.sidecar, self._runner = path, sidecar, runner
        self.format: str = sidecar["artifact_format"]

    @property
    def recurrent(self) -> bool:
        """Whether the policy takes and returns a memory."""
        return bool(self.sidecar.get("recurrent"))

    def initial_state(self, batch: int) -> tuple[torch.Tensor, ...]:
        """The zero memory of ``batch`` rows, from the sidecar (``()`` for feed-forward policies)."""
        return tuple(
            torch.zeros((batch, *s["shape"]), dtype=getattr(torch, s["dtype"])) for s in self.sidecar["state"]
        )

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor, *state: torch.Tensor) -> Any:
        """Run the artifact on ``obs [B, *obs_shape]`` (and the state)."""
        if self.format == "onnx":
            feed = {
                name: np.ascontiguousarray(t.detach().cpu().numpy())
                for name, t in zip(self.sidecar["inputs"], (obs, *state), strict=True)
            }
            out = [torch.from_numpy(np.asarray(a)) for a in self._runner.run(None, feed)]
        else:
            res = self._runner(obs, *state)
            out = list(res) if isinstance(res, (list, tuple)) else [res]
        return out[0] if len(out) == 1 else tuple(out)


def load_exported(path: str | os.PathLike) -> ExportedPolicy:
    """Load an artifact of `export_policy` (its sidecar says which format it is).

    Raises:
        ExportError: no sidecar, or not a tritonrl policy's; the ``onnx`` extra missing for an ONNX artifact.
        OSError: the artifact cannot be read.
    """
    p = Path(path)
    side = sidecar_path(p)
    try:
        doc = json.loads(side.read_text())
    except FileNotFoundError:
        raise ExportError(f"{p}: no sidecar {side.name} beside it (export_policy writes one)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExportError(f"{side}: not a JSON sidecar ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        raise ExportError(f"{side}: not a tritonrl policy sidecar")
    fmt = doc.get("artifact_format")
    _check_format(str(fmt))
    if fmt == "pt2":
        runner: Any = torch.export.load(str(p)).module()
    elif fmt == "aoti":
        runner = torch._inductor.aoti_load_package(str(p))
    else:
        import onnxruntime

        runner = onnxruntime.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    return ExportedPolicy(p, doc, runner)
