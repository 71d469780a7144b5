"""Inner-loop checkpoints (pure): segment arithmetic, the canonical encoding and its hash, the
checkpoint root and the manifest that opens it, and one-line errors for malformed input."""

from __future__ import annotations

import dataclasses
import json
import struct

import pytest
import torch

from syncline.blobstore import digest_of, validate_alias
from syncline.protocol import merkle
from syncline.protocol.checkpoints import (
    MAGIC,
    Checkpoint,
    CheckpointError,
    CheckpointManifest,
    InnerHyperparameters,
    checkpoint_hash,
    checkpoint_root,
    checkpoint_steps,
    manifest_alias,
    manifest_root_alias,
    segment_bounds,
    segment_count,
)
from syncline.protocol.layout import ParameterLayout

HP = InnerHyperparameters(lr=3e-3, beta1=0.9, beta2=0.95, weight_decay=0.01, eps=1e-8, batch_size=8)


@pytest.fixture(scope="module")
def layout() -> ParameterLayout:
    return ParameterLayout.from_state_dict({"b.bias": torch.zeros(7), "a.weight": torch.zeros(3, 5)})


def make(layout: ParameterLayout, *, seed: int = 0, step: int = 4, **changes: object) -> Checkpoint:
    gen = torch.Generator().manual_seed(seed)
    n = layout.numel
    ckpt = Checkpoint(
        step=step,
        layout_digest=layout.digest(),
        params=torch.randn(n, generator=gen),
        exp_avg=torch.randn(n, generator=gen) * 1e-3,
        exp_avg_sq=torch.rand(n, generator=gen) * 1e-6,
        adam_steps=(12, 12),
        optimizer=HP,
        dtype="fp32",
        threads=2,
        rng_state=bytes(range(256)) * 3,
    )
    return dataclasses.replace(ckpt, **changes) if changes else ckpt


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


# ---------------------------------------------------------------------- segments


def test_segments_cover_the_round_once() -> None:
    assert segment_count(8, 3) == 3
    assert [segment_bounds(s, 8, 3) for s in range(3)] == [(0, 3), (3, 6), (6, 8)]
    assert checkpoint_steps(8, 3) == (0, 3, 6, 8)
    assert segment_count(8, 8) == 1 and checkpoint_steps(8, 8) == (0, 8)
    assert segment_count(5, 1) == 5 and checkpoint_steps(5, 1) == (0, 1, 2, 3, 4, 5)
    for h in range(1, 12):
        for i in range(1, h + 1):
            covered = [step for s in range(segment_count(h, i)) for step in range(*segment_bounds(s, h, i))]
            assert covered == list(range(h))


@pytest.mark.parametrize("inner_steps, interval", [(8, 0), (8, 9), (0, 1), (8, True), (8, 2.0)])
def test_bad_intervals_are_refused(inner_steps: int, interval: int) -> None:
    with pytest.raises(CheckpointError) as exc:
        segment_count(inner_steps, interval)
    one_line(exc)


def test_segment_out_of_range() -> None:
    with pytest.raises(CheckpointError, match=r"out of range 0\.\.2"):
        segment_bounds(3, 8, 3)


# ---------------------------------------------------------------------- encoding


def test_round_trip_is_exact(layout: ParameterLayout) -> None:
    ckpt = make(layout)
    data = ckpt.to_bytes()
    assert data[:8] == MAGIC
    (header_len,) = struct.unpack("<Q", data[8:16])
    assert header_len % 8 == 0
    assert len(data) == 16 + header_len + 12 * layout.numel + len(ckpt.rng_state)
    back = Checkpoint.from_bytes(data, layout=layout)
    assert back.to_bytes() == data
    assert back.step == ckpt.step and back.adam_steps == ckpt.adam_steps and back.optimizer == HP
    assert back.threads == 2 and back.dtype == "fp32" and back.rng_state == ckpt.rng_state
    for name in ("params", "exp_avg", "exp_avg_sq"):
        assert torch.equal(getattr(back, name), getattr(ckpt, name))


def test_hash_is_deterministic_and_is_the_blob_digest(layout: ParameterLayout) -> None:
    a, b = make(layout), make(layout)
    assert a.to_bytes() == b.to_bytes() and a.hash == b.hash
    assert "0x" + a.hash.hex() == digest_of(a.to_bytes())
    assert checkpoint_hash(a.to_bytes()) == a.hash
    flipped = a.params.clone()
    flipped[3] = torch.nextafter(flipped[3], torch.tensor(10.0))  # one ulp
    assert dataclasses.replace(a, params=flipped).hash != a.hash
    assert make(layout, step=5).hash != a.hash
    assert dataclasses.replace(a, threads=1).hash != a.hash


def _with_header(data: bytes, edit: dict[str, object], *, raw: bytes | None = None) -> bytes:
    (header_len,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16 : 16 + header_len])
    header.update(edit)
    text = raw if raw is not None else json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return MAGIC + struct.pack("<Q", len(text)) + text + data[16 + header_len :]


def test_malformed_bytes_are_refused_in_one_line(layout: ParameterLayout) -> None:
    data = make(layout).to_bytes()
    (header_len,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16 : 16 + header_len])
    body = 16 + header_len
    nan = bytearray(data)
    nan[body : body + 4] = struct.pack("<f", float("nan"))
    negative = bytearray(data)
    offset = body + 8 * layout.numel
    negative[offset : offset + 4] = struct.pack("<f", -1.0)
    spaced = json.dumps(header, sort_keys=True).encode()  # same content, not canonical
    cases = {
        "bad magic": b"NOTACKPT" + data[8:],
        "truncated": data[:-1],
        "trailing": data + b"\x00",
        "too short": data[:10],
        "nan": bytes(nan),
        "negative second moment": bytes(negative),
        "non-canonical header": _with_header(data, {}, raw=spaced),
        "unknown key": _with_header(data, {"extra": 1}),
        "wrong format": _with_header(data, {"format": "v0"}),
        "bad lr": _with_header(data, {"optimizer": {**header["optimizer"], "lr": -1.0}}),
        "bad beta": _with_header(data, {"optimizer": {**header["optimizer"], "beta2": 1.0}}),
        "bad dtype": _with_header(data, {"dtype": "fp8"}),
        "bad threads": _with_header(data, {"threads": 0}),
        "bad step": _with_header(data, {"step": -1}),
        "bad layout hex": _with_header(data, {"layout": "0x12"}),
        "header not json": MAGIC + struct.pack("<Q", 8) + b"{{{{{{{{" + data[body:],
        "huge header": MAGIC + struct.pack("<Q", 1 << 40) + data[16:],
    }
    for name, bad in cases.items():
        with pytest.raises(CheckpointError) as exc:
            Checkpoint.from_bytes(bad, layout=layout)
        assert one_line(exc), name
    with pytest.raises(CheckpointError, match="more than the limit"):
        Checkpoint.from_bytes(data, max_bytes=len(data) - 1)


def test_layout_is_checked(layout: ParameterLayout) -> None:
    other = ParameterLayout.from_state_dict({"a.weight": torch.zeros(3, 5), "c.bias": torch.zeros(7)})
    data = make(layout).to_bytes()
    with pytest.raises(CheckpointError, match="another parameter layout"):
        Checkpoint.from_bytes(data, layout=other)
    three = make(layout, adam_steps=(1, 2, 3))
    with pytest.raises(CheckpointError, match="step counts"):
        Checkpoint.from_bytes(three.to_bytes(), layout=layout)
    fresh = make(layout, adam_steps=(0, 12))  # step 0 must mean zero moments
    with pytest.raises(CheckpointError, match="step 0 but non-zero moments"):
        Checkpoint.from_bytes(fresh.to_bytes(), layout=layout)
    zero = torch.zeros(layout.numel)
    ok = make(layout, adam_steps=(0, 0), exp_avg=zero, exp_avg_sq=zero)
    assert Checkpoint.from_bytes(ok.to_bytes(), layout=layout).adam_steps == (0, 0)


def test_bad_fields_are_refused_at_construction(layout: ParameterLayout) -> None:
    n = layout.numel
    bad: list[dict[str, object]] = [
        {"params": torch.zeros(n, dtype=torch.float64)},
        {"exp_avg": torch.zeros(n + 1)},
        {"adam_steps": ()},
        {"adam_steps": (1 << 24, 1)},
        {"step": True},
        {"layout_digest": b"short"},
        {"dtype": "fp16"},
        {"threads": 5000},
    ]
    for change in bad:
        with pytest.raises(CheckpointError) as exc:
            make(layout, **change)
        one_line(exc)
    with pytest.raises(CheckpointError):
        InnerHyperparameters(lr=1, beta1=0.9, beta2=0.95, weight_decay=0.0, eps=1e-8, batch_size=8)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError):
        InnerHyperparameters(lr=1e-3, beta1=0.9, beta2=0.95, weight_decay=0.0, eps=1e-8, batch_size=0)


# ---------------------------------------------------------------------- root and manifest


def _manifest(n: int = 4, interval: int = 3, inner_steps: int = 8) -> CheckpointManifest:
    hashes = tuple(checkpoint_hash(bytes([i]) * 10) for i in range(n))
    return CheckpointManifest(interval, inner_steps, hashes, tuple(f"file:///blobs/{i}" for i in range(n)))


def test_root_is_the_index_bound_merkle_root() -> None:
    m = _manifest()
    assert m.root == checkpoint_root(m.hashes) == merkle.root(list(m.hashes))
    assert m.segments == 3
    swapped = (m.hashes[1], m.hashes[0], *m.hashes[2:])
    assert checkpoint_root(swapped) != m.root
    with pytest.raises(CheckpointError):
        checkpoint_root([])
    with pytest.raises(CheckpointError):
        checkpoint_root([b"\x00" * 31])


def test_manifest_round_trip_and_verification() -> None:
    m = _manifest()
    data = m.to_json()
    assert CheckpointManifest.from_json(data) == m
    assert CheckpointManifest.from_json(data).to_json() == data
    m.verify_against(m.root)
    m.verify_against("0x" + m.root.hex().upper())
    with pytest.raises(CheckpointError, match="the commitment is") as exc:
        m.verify_against(b"\x01" * 32)
    one_line(exc)
    swapped = dataclasses.replace(m, hashes=(m.hashes[1], m.hashes[0], *m.hashes[2:]))
    with pytest.raises(CheckpointError):
        swapped.verify_against(m.root)
    m.check_task(8, 3)
    with pytest.raises(CheckpointError, match="the task has"):
        m.check_task(8, 2)


def test_bad_manifests_are_refused_in_one_line() -> None:
    good = json.loads(_manifest().to_json())
    cases: dict[str, bytes] = {
        "not json": b"{",
        "not an object": b"[]",
        "missing key": json.dumps({k: v for k, v in good.items() if k != "uris"}).encode(),
        "extra key": json.dumps({**good, "x": 1}).encode(),
        "wrong format": json.dumps({**good, "format": "v0"}).encode(),
        "one hash short": json.dumps({**good, "hashes": good["hashes"][:-1], "uris": good["uris"][:-1]}).encode(),
        "uris short": json.dumps({**good, "uris": good["uris"][:-1]}).encode(),
        "bad hex": json.dumps({**good, "hashes": ["0x12", *good["hashes"][1:]]}).encode(),
        "interval 0": json.dumps({**good, "interval": 0}).encode(),
        "interval > H": json.dumps({**good, "interval": 9}).encode(),
        "uri not str": json.dumps({**good, "uris": [1, 2, 3, 4]}).encode(),
        "too big": b" " * (2 << 20),
    }
    for name, data in cases.items():
        with pytest.raises(CheckpointError) as exc:
            CheckpointManifest.from_json(data)
        assert one_line(exc), name


def test_aliases_are_valid_blob_store_names() -> None:
    assert validate_alias(manifest_alias(12, 3, 255)) == "checkpoints:12:3:255"
    alias = manifest_root_alias(b"\xab" * 32)
    assert validate_alias(alias) == "checkpoints:0x" + "ab" * 32


# ---------------------------------------------------------------------- device class declaration


def test_a_cpu_checkpoint_keeps_the_v1_encoding_and_declares_cpu(layout: ParameterLayout) -> None:
    ckpt = make(layout, dtype="bf16")
    data = ckpt.to_bytes()
    (header_len,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16 : 16 + header_len])
    assert header["format"] == "syncline-checkpoint-v1"
    assert "device" not in header and "deterministic" not in header
    back = Checkpoint.from_bytes(data, layout=layout)
    assert (back.device, back.deterministic, back.device_class) == ("cpu", True, "cpu-bf16")


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_cuda_checkpoint_is_v2_and_binds_its_device_and_mode(layout: ParameterLayout, deterministic: bool) -> None:
    cpu = make(layout)
    cuda = dataclasses.replace(cpu, device="cuda", deterministic=deterministic)
    data = cuda.to_bytes()
    (header_len,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16 : 16 + header_len])
    assert header["format"] == "syncline-checkpoint-v2"
    assert (header["device"], header["deterministic"]) == ("cuda", deterministic)
    back = Checkpoint.from_bytes(data, layout=layout)
    assert (back.device, back.deterministic, back.device_class) == ("cuda", deterministic, "cuda-fp32")
    assert back.to_bytes() == data
    # the declaration is part of the hash the root commits
    assert len({cpu.hash, cuda.hash, dataclasses.replace(cuda, deterministic=not deterministic).hash}) == 3


def test_device_declarations_that_are_not_canonical_are_refused(layout: ParameterLayout) -> None:
    cuda = dataclasses.replace(make(layout), device="cuda").to_bytes()
    cpu = make(layout).to_bytes()
    cases = {
        "v2 naming cpu": _with_header(cuda, {"device": "cpu"}),
        "v2 without its keys": _with_header(cpu, {"format": "syncline-checkpoint-v2"}),
        "v1 with device keys": _with_header(cuda, {"format": "syncline-checkpoint-v1"}),
        "unknown device": _with_header(cuda, {"device": "tpu"}),
        "deterministic not a bool": _with_header(cuda, {"deterministic": 1}),
    }
    for name, bad in cases.items():
        with pytest.raises(CheckpointError) as exc:
            Checkpoint.from_bytes(bad, layout=layout)
        assert one_line(exc), name
    with pytest.raises(CheckpointError, match="always deterministic"):
        make(layout, deterministic=False)
    with pytest.raises(CheckpointError, match="device 'mps'"):
        make(layout, device="mps")
