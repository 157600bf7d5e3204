"""Replay buffers: checkpoints (round trips across dtypes, damaged or foreign files, atomic and
synced writes) and the CUDA end-to-end check (``--gpu``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from replay_model import OBS, filled, make_step, same_content, snapshot
from tritonrl.toolkit.replay import PrioritizedReplayBuffer

# ---- checkpoints -------------------------------------------------------------------------------


def test_save_load_roundtrip_across_dtypes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONRL_DTYPE", "bf16")  # saved in bf16 ...
    src = filled()
    src.update_priorities(torch.tensor([0, 3]), torch.tensor([4.0, 0.5]))
    src.sample(2)
    path = tmp_path / "replay.safetensors"
    src.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["replay.safetensors"]  # no temp file left
    monkeypatch.delenv("TRITONRL_DTYPE")  # ... loaded in f32
    dst = PrioritizedReplayBuffer(10, OBS, num_envs=2, n_step=2)
    dst.load(path)
    assert dst.obs_dtype == torch.float32
    a, b = src.state_dict(), dst.state_dict()
    assert a.pop("meta") == b.pop("meta")
    for k in a:
        assert torch.equal(a[k].to(b[k].dtype), b[k]), k
    ga = src.sample(4, generator=torch.Generator().manual_seed(9))
    gb = dst.sample(4, generator=torch.Generator().manual_seed(9))
    assert torch.equal(ga.indices, gb.indices) and torch.equal(ga.weights, gb.weights)
    rng = np.random.default_rng(7)
    s = make_step(50, 2, rng, 0.0, 0.0)
    src.add(*s)
    dst.add(*s)  # pending n-step windows resumed too
    assert len(src) == len(dst) and src.pending == dst.pending


def test_load_rejects_damaged_or_foreign_files(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    src = filled()
    good = tmp_path / "good.safetensors"
    src.save(good)
    dst = filled()
    dst.update_priorities(torch.tensor([1]), torch.tensor([7.0]))
    before = snapshot(dst)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable safetensors"):
        dst.load(truncated)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(3)}, str(foreign))
    with pytest.raises(ValueError, match="not a replay-buffer file"):
        dst.load(foreign)
    other = PrioritizedReplayBuffer(11, OBS, num_envs=2, n_step=2)
    with pytest.raises(ValueError, match="configuration"):
        other.load(good)
    with pytest.raises(FileNotFoundError):
        dst.load(tmp_path / "missing.safetensors")
    assert same_content(snapshot(dst), before)


def test_interrupted_save_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    buf = filled()
    path = tmp_path / "r.safetensors"
    buf.save(path)
    old = path.read_bytes()

    def boom(fd: int) -> None:  # the bytes were written to the temporary file; flushing them fails
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        buf.save(path)
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["r.safetensors"]


def test_save_syncs_the_temporary_file_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without an fsync before os.replace, a power loss can leave the new name pointing at an empty
    # or partial file (the rename reaches the disk before the data).
    import os

    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", os.path.basename(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    filled().save(tmp_path / "r.safetensors")
    # then the folder is synced too, so that the rename itself survives a power cut
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"] and events[0][1] == events[1][1], events
    assert events[2][1] == tmp_path.name, events


# ---- CUDA (--gpu) -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_buffer_end_to_end() -> None:
    from tritonrl.toolkit.precision import training_dtype

    buf = PrioritizedReplayBuffer(1000, OBS, device="cuda", num_envs=4, n_step=3)
    assert buf.obs_dtype == training_dtype("cuda") and not buf.check_priorities
    rng = np.random.default_rng(0)
    steps = [make_step(t, 4, rng) for t in range(300)]
    for s in steps[:100]:
        buf.add(*s)
    buf.extend(*(np.stack(f) for f in zip(*steps[100:], strict=True)))
    for g in (torch.Generator(device="cuda").manual_seed(0), torch.Generator().manual_seed(0)):
        batch = buf.sample(256, generator=g)
        assert batch.obs.device.type == "cuda" and batch.obs.dtype == buf.obs_dtype
        assert batch.indices.device.type == "cuda"
    buf.update_priorities(batch.indices, torch.randn(256, device="cuda"))
    buf.check()
    before = buf.priorities()
    buf.update_priorities(batch.indices, torch.full((256,), float("nan"), device="cuda"))  # deferred
    assert torch.equal(buf.priorities(), before)
    with pytest.raises(ValueError, match="NaN"):
        buf.check()
    buf.check_priorities = True
    with pytest.raises(ValueError, match="indices"):
        buf.update_priorities(torch.tensor([len(buf)], device="cuda"), torch.ones(1, device="cuda"))
