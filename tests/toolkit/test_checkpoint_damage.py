"""Damaged and hostile checkpoint files: every one is a one-line CheckpointError naming the file.

Truncations at every offset, flipped bytes (hypothesis), crafted headers (bad dtype names, torch
attributes that are not dtypes, malformed entries, absurd nesting, metadata of the wrong type),
and files that are not regular files (a FIFO, a link to /dev/zero, a folder) must never raise
TypeError / AttributeError / RecursionError / KeyError, hang, or read unbounded data.
"""

from __future__ import annotations

import json
import os
import random
import struct
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonrl.toolkit.checkpoint import MAX_HEADER_BYTES, CheckpointError, load_checkpoint, save_checkpoint
from tritonrl.toolkit.runstate import capture_rng_state, restore_rng_state


def _state() -> dict:
    return {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "step": 3,
        "t": (1, "a"),
        "ids": {0: torch.ones(2, dtype=torch.int64)},
        "arr": np.arange(3, dtype=np.int32),
        "dtype": torch.bfloat16,
        "cfg": {"lr": 1e-3, "tags": ["x"]},
    }


@pytest.fixture(scope="module")
def good_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "c.safetensors"
    save_checkpoint(path, _state())
    return path.read_bytes()


def _expect_error(path, match: str | None = None) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg and len(msg) < 400, msg
    if match is not None:
        assert match in msg, msg
    return msg


def test_every_truncation_is_a_clear_error(tmp_path, good_bytes):
    path = tmp_path / "cut.safetensors"
    offsets = sorted(set(range(0, 64)) | set(range(64, len(good_bytes), 7)) | {len(good_bytes) - 1})
    for cut in offsets:
        path.write_bytes(good_bytes[:cut])
        _expect_error(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipped_bytes_load_or_fail_cleanly(tmp_path, good_bytes, data):
    damaged = bytearray(good_bytes)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(damaged) - 1))
        damaged[i] ^= data.draw(st.integers(1, 255))
    path = tmp_path / "flip.safetensors"
    path.write_bytes(bytes(damaged))
    try:
        state = load_checkpoint(path)
    except CheckpointError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
    else:
        # a flip in JSON whitespace or the header's padding (the checksums refuse the rest:
        # test_checkpoint_integrity.py)
        assert isinstance(state, dict)


def _craft(header: dict | bytes, *, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def _with_doc(doc: object) -> bytes:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return _craft({"__metadata__": {"tritonrl": text}})


def _with_state(tree: object) -> bytes:
    return _with_doc({"format": "tritonrl-checkpoint", "version": 1, "state": tree})


DEEP = "[" * 100_000 + "]" * 100_000

CRAFTED = {
    # header framing
    "length-field-absurd": (_craft(b"{}", length=2**63), "header length field"),
    "length-field-over-limit": (_craft(b"{}", length=MAX_HEADER_BYTES + 1), "header length field"),
    "length-field-past-end": (_craft(b"{}", length=1000), "does not fit"),
    "header-not-utf8": (_craft(b"\xff\xfe{}"), "unreadable header"),
    "header-not-object": (_craft(b"[1, 2]"), "not a JSON object"),
    "header-deeply-nested": (_craft(DEEP.encode()), "not a safetensors file"),
    # metadata
    "metadata-list": (_craft({"__metadata__": [1, 2]}), "not a tritonrl checkpoint"),
    "metadata-string": (_craft({"__metadata__": "tritonrl"}), "not a tritonrl checkpoint"),
    "metadata-entry-int": (_craft({"__metadata__": {"tritonrl": 5}}), "corrupt checkpoint metadata"),
    "doc-deeply-nested": (_with_doc(DEEP), "corrupt checkpoint metadata"),
    "doc-list": (_with_doc([1]), "corrupt checkpoint metadata"),
    "doc-bad-json": (_with_doc("{nope"), "corrupt checkpoint metadata"),
    "doc-other-format": (_with_doc({"format": "x" * 500, "version": 1, "state": {}}), "not a tritonrl"),
    "doc-newer-version": (_with_doc({"format": "tritonrl-checkpoint", "version": 2, "state": {}}), "version"),
    "doc-no-state": (_with_doc({"format": "tritonrl-checkpoint", "version": 1}), "state is missing"),
    "doc-state-list": (_with_state([1, 2]), "state is missing or not a dict"),
    # state entries
    "state-deeply-nested": (_with_state({"a": json.loads("[" * 900 + "]" * 900)}), None),
    "dtype-tensor-class": (_with_state({"d": {"__dtype__": "Tensor"}}), "not a torch dtype"),
    "dtype-function": (_with_state({"d": {"__dtype__": "manual_seed"}}), "not a torch dtype"),
    "dtype-unknown-name": (_with_state({"d": {"__dtype__": "float33"}}), "not a torch dtype"),
    "dtype-not-string": (_with_state({"d": {"__dtype__": [1]}}), "not a torch dtype"),
    "ndarray-object-dtype": (_with_state({"a": {"__ndarray__": [1], "dtype": "object"}}), "numeric"),
    "ndarray-bad-dtype": (_with_state({"a": {"__ndarray__": [1], "dtype": "nonsense"}}), "numeric"),
    "ndarray-dtype-int": (_with_state({"a": {"__ndarray__": [1], "dtype": 3}}), "numeric"),
    "ndarray-ragged": (_with_state({"a": {"__ndarray__": [[1], [1, 2]], "dtype": "float32"}}), "malformed"),
    "ndarray-text": (_with_state({"a": {"__ndarray__": "abc", "dtype": "float32"}}), "malformed"),
    "ndarray-no-dtype": (_with_state({"a": {"__ndarray__": [1]}}), "malformed entry"),
    "dict-not-list": (_with_state({"d": {"__dict__": 5}}), "malformed __dict__"),
    "dict-short-pair": (_with_state({"d": {"__dict__": [[1]]}}), "malformed __dict__"),
    "dict-list-key": (_with_state({"d": {"__dict__": [[[1], 2]]}}), "malformed __dict__"),
    "dict-long-pair": (_with_state({"d": {"__dict__": [["a", 1, 2]]}}), "malformed __dict__"),
    "tuple-not-list": (_with_state({"t": {"__tuple__": 5}}), "malformed __tuple__"),
    "tensor-name-list": (_with_state({"w": {"__tensor__": ["x"]}}), "missing"),
    "tensor-name-missing": (_with_state({"w": {"__tensor__": "nope"}}), "missing"),
    "marker-extra-key": (_with_state({"w": {"__tensor__": "w", "extra": 1}}), "malformed entry"),
    "marker-unknown": (_with_state({"w": {"__import__": "os"}}), "malformed entry"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_header_is_a_clear_error(tmp_path, name):
    data, match = CRAFTED[name]
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(data)
    if name == "state-deeply-nested":  # 900 levels fit Python's JSON parser; the decoder must cope too
        try:
            load_checkpoint(path)
        except CheckpointError as exc:
            assert str(exc).startswith(str(path))
        return
    _expect_error(path, match)


def test_bad_header_is_refused_before_the_payload_is_read(tmp_path, monkeypatch):
    """A bad header is reported from the first 8 + n bytes: the rest of the file is not read."""
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(_craft(b"[not json"))
        f.truncate(1 << 34)  # a sparse 16 GiB file: reading it whole would exhaust memory
    _expect_error(path, "unreadable header")


def _loads_within(path, seconds: float = 5.0) -> BaseException | None:
    box: list[BaseException | None] = []

    def target() -> None:
        try:
            load_checkpoint(path)
            box.append(None)
        except BaseException as exc:  # reported to the test thread
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"load_checkpoint({path}) did not return within {seconds} s"
    return box[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_does_not_hang(tmp_path):
    path = tmp_path / "fifo.safetensors"
    os.mkfifo(path)
    exc = _loads_within(path)
    assert isinstance(exc, CheckpointError) and str(exc).startswith(str(path)), exc
    assert "not a regular file (a FIFO)" in str(exc)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_link_to_dev_zero_is_refused(tmp_path):
    path = tmp_path / "zero.safetensors"
    os.symlink("/dev/zero", path)
    exc = _loads_within(path)
    assert isinstance(exc, CheckpointError) and str(exc).startswith(str(path)), exc
    assert "not a regular file (a device)" in str(exc)


def test_folder_and_link_to_good_file(tmp_path, good_bytes):
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    _expect_error(folder, "a directory")
    real = tmp_path / "real.safetensors"
    real.write_bytes(good_bytes)
    link = tmp_path / "link.safetensors"
    os.symlink(real, link)
    assert load_checkpoint(link)["step"] == 3  # a link to a regular file is fine


# ----------------------------------------------------------------------------- RNG state


def _rng_snapshot() -> tuple:
    np_state = np.random.get_state()  # noqa: NPY002
    return torch.get_rng_state().clone(), np_state[1].copy(), np_state[2], random.getstate()


def _damaged_rng() -> dict[str, dict]:
    good = capture_rng_state()
    cases = {
        "torch-short": {**good, "torch": good["torch"][:100]},
        "torch-not-tensor": {**good, "torch": [1, 2, 3]},
        "numpy-short-keys": {**good, "numpy": {**good["numpy"], "keys": good["numpy"]["keys"][:10]}},
        "numpy-no-pos": {**good, "numpy": {k: v for k, v in good["numpy"].items() if k != "pos"}},
        "numpy-not-dict": {**good, "numpy": 7},
        "python-short": {**good, "python": (3, (1, 2, 3), None)},
        "python-not-triple": {**good, "python": 5},
        "python-bad-gauss": {**good, "python": (good["python"][0], good["python"][1], "x")},
        "no-torch": {k: v for k, v in good.items() if k != "torch"},
    }
    cases["not-a-dict"] = [1, 2]  # type: ignore[assignment]
    return cases


@pytest.mark.parametrize("case", sorted(_damaged_rng()))
def test_damaged_rng_state_changes_nothing(case):
    state = _damaged_rng()[case]
    random.random()
    before = _rng_snapshot()
    with pytest.raises(CheckpointError) as info:
        restore_rng_state(state, where="run/checkpoint.safetensors (rng)")
    assert str(info.value).startswith("run/checkpoint.safetensors (rng): ")
    after = _rng_snapshot()
    assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    assert before[2] == after[2] and before[3] == after[3]


def test_rng_state_survives_a_checkpoint_round_trip(tmp_path):
    path = tmp_path / "rng.safetensors"
    save_checkpoint(path, {"rng": capture_rng_state()})
    expected = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    restore_rng_state(load_checkpoint(path)["rng"])
    got = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1])
    assert expected[2] == got[2]
