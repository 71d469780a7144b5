"""Inner-loop checkpoints for training-fraud proofs: segments, canonical bytes, hashes, root, manifest.

A round's inner loop of ``H = inner_steps`` AdamW steps is cut into segments of ``interval`` steps:
segment ``s`` covers steps ``[s * interval, min((s + 1) * interval, H))``, and there are
``S = ceil(H / interval)`` of them. Checkpoint ``c_0`` is the state before step 0 (the round's
weights plus the AdamW state the trainer carried over from earlier rounds) and ``c_s`` the state
after segment ``s - 1``: ``S + 1`` checkpoints, taken after steps ``0, interval, 2 * interval, ..., H``
(:func:`checkpoint_steps`). Index ``S`` also names the *derivation segment*: the check that the
committed outer-gradient payload is the one derived from ``c_S`` and the round's start state.

Canonical bytes of a checkpoint (:meth:`Checkpoint.to_bytes`)::

    magic       8 bytes   b"SYNCKPT1"
    header_len  8 bytes   uint64 little-endian, a multiple of 8
    header      JSON, sorted keys, no whitespace, ASCII, padded with spaces to header_len
    params      numel float32 little-endian   (canonical layout order, see protocol/layout.py)
    exp_avg     numel float32 little-endian   (AdamW first moment, same order)
    exp_avg_sq  numel float32 little-endian   (AdamW second moment, same order)
    rng_state   header["rng_bytes"] bytes     (torch's CPU generator state: dropout draws)

The header holds ``format``, ``step`` (inner steps done this round), ``numel``, ``layout`` (the
layout digest), ``adam_steps`` (AdamW's step count per layout entry, 0 for a parameter that never
had a gradient: its moments are then zero), ``optimizer`` (``lr``, ``beta1``, ``beta2``,
``weight_decay``, ``eps``, ``batch_size``: what replaying the next segment needs), ``dtype``
(``fp32`` or ``bf16`` autocast), ``threads`` (torch intra-op threads the trainer ran with) and
``rng_bytes``.

The *device class* the trainer declares (``device-dtype``: ``cpu-fp32``, ``cpu-bf16``,
``cuda-fp32``, ``cuda-bf16``) and its deterministic mode live in every checkpoint's header, so the
committed ``checkpointRoot`` binds them (the manifest's own fields are not bound: any JSON with the
same hashes opens the root). A CPU checkpoint is ``syncline-checkpoint-v1`` exactly as before (CPU
torch is deterministic; a v1 checkpoint declares ``cpu``); a checkpoint taken on another device is
``syncline-checkpoint-v2``, whose header adds ``device`` (``cuda``) and ``deterministic``
(``torch.use_deterministic_algorithms`` with ``CUBLAS_WORKSPACE_CONFIG`` set). A v2 header naming
``cpu`` is refused, so each checkpoint still has exactly one encoding.

Decoding re-encodes and requires the identical bytes, so every checkpoint has exactly one
encoding and ``checkpoint_hash = keccak256(bytes)`` is well defined. That hash is also the
checkpoint's blob digest in the content-addressed store. A checkpoint costs 12 bytes per
parameter plus the header and 5 KiB of generator state.

The trainer commits ``checkpointRoot = merkle.root([hash(c_0), ..., hash(c_S)])`` (leaf ``i``
binds index ``i``, see :mod:`syncline.protocol.merkle`) and publishes a small JSON
:class:`CheckpointManifest` listing the hashes and where the blobs are. The manifest is located
through the candidates of two aliases (:func:`manifest_root_alias`, :func:`manifest_alias`), in
the trainer's signed slot first; an alias is a hint, never evidence: a reader keeps only a
candidate whose hashes open the committed root (:meth:`CheckpointManifest.verify_against`), and
fetches each checkpoint by its hash (the manifest's uris are hints too).

Everything here is pure (no I/O) except :class:`CheckpointFile`, a checkpoint in a file that a
large model's referee reads range by range (checked exactly as the bytes would be); errors are
one-line :class:`CheckpointError`.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncline.errors import SynclineError
from syncline.protocol import merkle
from syncline.protocol.fixed_point import padded_json
from syncline.protocol.hashing import keccak
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.wire import WireFormatError, load_bounded_json

CHECKPOINT_FORMAT = "syncline-checkpoint-v1"
CHECKPOINT_FORMAT_V2 = "syncline-checkpoint-v2"
MANIFEST_FORMAT = "syncline-checkpoint-manifest-v1"
MAGIC = b"SYNCKPT1"
MAX_HEADER_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 1 << 20
MAX_SEGMENTS = 1 << 16
MAX_THREADS = 1024
MAX_URI_CHARS = 1024
MAX_RNG_BYTES = 1 << 16
DTYPES = ("fp32", "bf16")
DEVICES = ("cpu", "cuda")
_HEX32 = re.compile(r"0x[0-9a-f]{64}")
_OPTIMIZER_KEYS = ("batch_size", "beta1", "beta2", "eps", "lr", "weight_decay")
_HEADER_KEYS = ("adam_steps", "dtype", "format", "layout", "numel", "optimizer", "rng_bytes", "step", "threads")
_HEADER_KEYS_V2 = tuple(sorted((*_HEADER_KEYS, "device", "deterministic")))


class CheckpointError(SynclineError, ValueError):
    """A checkpoint, a manifest or a segment argument is malformed or does not match its commitment."""


# ---------------------------------------------------------------------- segments


def check_interval(inner_steps: int, interval: int) -> None:
    """Raise CheckpointError unless ``1 <= interval <= inner_steps``."""
    for name, value in (("inner_steps", inner_steps), ("interval", interval)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointError(f"{name} must be an int, got {value!r}")
    if inner_steps < 1:
        raise CheckpointError(f"inner_steps must be positive, got {inner_steps}")
    if not 1 <= interval <= inner_steps:
        raise CheckpointError(f"checkpoint interval {interval} must be within 1..inner_steps ({inner_steps})")
    if _segment_count(inner_steps, interval) > MAX_SEGMENTS:
        raise CheckpointError(f"{inner_steps} steps every {interval} give more than {MAX_SEGMENTS} segments")


def _segment_count(inner_steps: int, interval: int) -> int:
    return -(-inner_steps // interval)


def segment_count(inner_steps: int, interval: int) -> int:
    """Number of training segments ``S = ceil(inner_steps / interval)`` (checkpoints: ``S + 1``)."""
    check_interval(inner_steps, interval)
    return _segment_count(inner_steps, interval)


def segment_bounds(segment: int, inner_steps: int, interval: int) -> tuple[int, int]:
    """Steps ``[start, stop)`` of training segment ``segment`` (``0 <= segment < S``)."""
    count = segment_count(inner_steps, interval)
    if isinstance(segment, bool) or not isinstance(segment, int) or not 0 <= segment < count:
        raise CheckpointError(f"training segment {segment!r} out of range 0..{count - 1}")
    return segment * interval, min((segment + 1) * interval, inner_steps)


def checkpoint_steps(inner_steps: int, interval: int) -> tuple[int, ...]:
    """The step index of every checkpoint: ``(0, interval, 2 * interval, ..., inner_steps)``."""
    count = segment_count(inner_steps, interval)
    return tuple(min(s * interval, inner_steps) for s in range(count + 1))


# ---------------------------------------------------------------------- one checkpoint


@dataclass(frozen=True)
class InnerHyperparameters:
    """What replaying a segment needs besides the tensors: AdamW's coefficients and the batch size."""

    lr: float
    beta1: float
    beta2: float
    weight_decay: float
    eps: float
    batch_size: int

    def __post_init__(self) -> None:
        for name in ("lr", "beta1", "beta2", "weight_decay", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value):
                raise CheckpointError(f"optimizer {name} must be a finite float, got {value!r}")
        if not (self.lr > 0 and self.eps > 0 and self.weight_decay >= 0):
            raise CheckpointError("optimizer lr and eps must be positive and weight_decay non-negative")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise CheckpointError(f"optimizer betas ({self.beta1}, {self.beta2}) must lie in [0, 1)")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise CheckpointError(f"optimizer batch_size must be a positive int, got {self.batch_size!r}")

    def to_mapping(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in _OPTIMIZER_KEYS}

    @classmethod
    def from_mapping(cls, data: object) -> InnerHyperparameters:
        if not isinstance(data, Mapping) or sorted(data) != sorted(_OPTIMIZER_KEYS):
            raise CheckpointError(f"checkpoint optimizer must have exactly {', '.join(_OPTIMIZER_KEYS)}")
        return cls(**{k: data[k] for k in _OPTIMIZER_KEYS})


def _float32_vector(t: object, name: str, numel: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != 1 or t.numel() != numel:
        kind = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise CheckpointError(f"checkpoint {name} must be a float32 vector of {numel} values, got {kind}")
    return t.detach().cpu().contiguous()


def checkpoint_header(
    *,
    step: int,
    layout_digest: bytes,
    numel: int,
    adam_steps: Sequence[int],
    optimizer: InnerHyperparameters,
    dtype: str,
    threads: int,
    rng_bytes: int,
    device: str,
    deterministic: bool,
) -> bytes:
    """The canonical JSON header of a checkpoint (:meth:`Checkpoint.to_bytes` writes ``MAGIC``,
    its length, it, then the three float32 vectors and the RNG state). A writer that streams the
    vectors from a model (``InnerLoop.write_checkpoint``) builds the same bytes with it."""
    header: dict[str, Any] = {
        "adam_steps": list(adam_steps),
        "dtype": dtype,
        "format": CHECKPOINT_FORMAT if device == "cpu" else CHECKPOINT_FORMAT_V2,
        "layout": "0x" + layout_digest.hex(),
        "numel": numel,
        "optimizer": optimizer.to_mapping(),
        "rng_bytes": rng_bytes,
        "step": step,
        "threads": threads,
    }
    if device != "cpu":
        header |= {"device": device, "deterministic": deterministic}
    text = padded_json(header)
    return MAGIC + struct.pack("<Q", len(text)) + text


def _check_layout_fields(digest: bytes, numel: int, adam_steps: Sequence[int], layout: ParameterLayout) -> None:
    """The layout digest, the size and one AdamW step count per entry (``check_layout``'s first checks)."""
    if digest != layout.digest():
        raise CheckpointError("checkpoint was taken for another parameter layout (digest differs)")
    if numel != layout.numel or len(adam_steps) != len(layout.entries):
        raise CheckpointError(
            f"checkpoint has {numel} values / {len(adam_steps)} step counts, "
            f"the layout {layout.numel} / {len(layout.entries)}"
        )


def decode_checkpoint_header(prefix: bytes, total_len: int) -> tuple[dict[str, Any], int]:
    """Decode and check the header of a checkpoint of ``total_len`` bytes whose first bytes are
    ``prefix`` (at least the magic, the length and the header): ``(header, offset of the body)``.
    Shared by :meth:`Checkpoint.from_bytes` and :meth:`CheckpointFile.open`; CheckpointError
    (one line) on bad magic or header, or a size that does not match the header."""
    if total_len < 16 or prefix[:8] != MAGIC:
        raise CheckpointError("not a syncline checkpoint: bad magic")
    (header_len,) = struct.unpack("<Q", prefix[8:16])
    if header_len > MAX_HEADER_BYTES or header_len % 8 or 16 + header_len > total_len:
        raise CheckpointError(f"checkpoint header length {header_len} is invalid")
    if not prefix[16 : 16 + header_len].isascii():
        raise CheckpointError("checkpoint header is not ASCII JSON")
    try:
        header = load_bounded_json(
            prefix[16 : 16 + header_len], max_bytes=MAX_HEADER_BYTES, max_depth=4, what="checkpoint header"
        )
    except WireFormatError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(header, dict) or header.get("format") not in (CHECKPOINT_FORMAT, CHECKPOINT_FORMAT_V2):
        got = header.get("format") if isinstance(header, dict) else None
        raise CheckpointError(
            f"checkpoint format {got!r} is neither {CHECKPOINT_FORMAT!r} nor {CHECKPOINT_FORMAT_V2!r}"
        )
    keys = _HEADER_KEYS if header["format"] == CHECKPOINT_FORMAT else _HEADER_KEYS_V2
    if sorted(header) != sorted(keys):
        raise CheckpointError(f"{header['format']} header must have exactly the keys {', '.join(keys)}")
    if header["format"] == CHECKPOINT_FORMAT_V2 and header["device"] == "cpu":
        raise CheckpointError(f"a cpu checkpoint is encoded as {CHECKPOINT_FORMAT}, not {CHECKPOINT_FORMAT_V2}")
    numel, rng_bytes = header["numel"], header["rng_bytes"]
    for name, value in (("numel", numel), ("rng_bytes", rng_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(f"checkpoint {name} must be a non-negative int, got {value!r}")
    if numel == 0 or rng_bytes > MAX_RNG_BYTES:
        raise CheckpointError(f"checkpoint numel {numel} / rng_bytes {rng_bytes} out of range")
    layout_hex = header["layout"]
    if not isinstance(layout_hex, str) or _HEX32.fullmatch(layout_hex) is None:
        raise CheckpointError("checkpoint layout digest must be 0x + 64 lowercase hex")
    if not isinstance(header["adam_steps"], list):
        raise CheckpointError("checkpoint adam_steps must be a list")
    body = 16 + header_len
    if total_len != body + 12 * numel + rng_bytes:
        raise CheckpointError(
            f"checkpoint of {numel} parameters needs {body + 12 * numel + rng_bytes} bytes, got {total_len}"
        )
    return header, body


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """The full inner-loop state after ``step`` inner steps of a round (see the module docstring)."""

    step: int
    layout_digest: bytes
    params: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    adam_steps: tuple[int, ...]
    optimizer: InnerHyperparameters
    dtype: str = "fp32"
    threads: int = 1
    rng_state: bytes = b""
    device: str = "cpu"
    deterministic: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise CheckpointError(f"checkpoint step must be a non-negative int, got {self.step!r}")
        if not isinstance(self.layout_digest, bytes) or len(self.layout_digest) != 32:
            raise CheckpointError("checkpoint layout digest must be 32 bytes")
        if not isinstance(self.params, torch.Tensor) or self.params.dim() != 1 or self.params.numel() == 0:
            raise CheckpointError("checkpoint params must be a non-empty float32 vector")
        numel = self.params.numel()
        for name in ("params", "exp_avg", "exp_avg_sq"):
            object.__setattr__(self, name, _float32_vector(getattr(self, name), name, numel))
        steps = self.adam_steps
        if not isinstance(steps, tuple) or not steps:
            raise CheckpointError("checkpoint adam_steps must be a non-empty tuple (one count per parameter)")
        if any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 1 << 24 for s in steps):
            raise CheckpointError("checkpoint adam_steps must be ints in [0, 2**24) (float32-exact step counts)")
        if not isinstance(self.optimizer, InnerHyperparameters):
            raise CheckpointError("checkpoint optimizer must be InnerHyperparameters")
        if self.dtype not in DTYPES:
            raise CheckpointError(f"checkpoint dtype {self.dtype!r} must be one of {', '.join(DTYPES)}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
            raise CheckpointError(f"checkpoint threads must be an int in 1..{MAX_THREADS}, got {self.threads!r}")
        if not isinstance(self.rng_state, bytes) or len(self.rng_state) > MAX_RNG_BYTES:
            raise CheckpointError(f"checkpoint rng_state must be at most {MAX_RNG_BYTES} bytes")
        if self.device not in DEVICES:
            raise CheckpointError(f"checkpoint device {self.device!r} must be one of {', '.join(DEVICES)}")
        if not isinstance(self.deterministic, bool):
            raise CheckpointError(f"checkpoint deterministic must be true or false, got {self.deterministic!r}")
        if self.device == "cpu" and not self.deterministic:
            raise CheckpointError("a cpu checkpoint is always deterministic (CPU torch runs are bit-reproducible)")

    @property
    def numel(self) -> int:
        return int(self.params.numel())

    @property
    def device_class(self) -> str:
        """What the trainer declares it trained on: ``device-dtype`` (e.g. ``cpu-bf16``)."""
        return f"{self.device}-{self.dtype}"

    def values(self, vector: str, start: int, stop: int) -> torch.Tensor:
        """Coordinates ``[start, stop)`` of ``vector`` (``params``, ``exp_avg`` or ``exp_avg_sq``)
        as float32, as :meth:`CheckpointFile.values` reads them from a file."""
        values: torch.Tensor = getattr(self, _vector_name(vector))
        return values[start:stop]

    def _header(self) -> bytes:
        return checkpoint_header(
            step=self.step,
            layout_digest=self.layout_digest,
            numel=self.numel,
            adam_steps=self.adam_steps,
            optimizer=self.optimizer,
            dtype=self.dtype,
            threads=self.threads,
            rng_bytes=len(self.rng_state),
            device=self.device,
            deterministic=self.deterministic,
        )

    def to_bytes(self) -> bytes:
        """The canonical encoding (the same checkpoint always gives the same bytes)."""
        body = b"".join(
            t.numpy().astype("<f4", copy=False).tobytes() for t in (self.params, self.exp_avg, self.exp_avg_sq)
        )
        return self._header() + body + self.rng_state

    def write(self, sink: Callable[[bytes], object], *, block: int = 1 << 22) -> None:
        """Stream :meth:`to_bytes` into ``sink`` (e.g. a file's ``write``) in pieces of at most
        ``block`` values, so a checkpoint of a large model is never held as one bytes object."""
        sink(self._header())
        for t in (self.params, self.exp_avg, self.exp_avg_sq):
            values = t.numpy()
            for start in range(0, values.shape[0], block):
                sink(values[start : start + block].astype("<f4", copy=False).tobytes())
        sink(self.rng_state)

    @property
    def hash(self) -> bytes:
        """``checkpoint_hash``: keccak256 of :meth:`to_bytes` (32 bytes)."""
        return checkpoint_hash(self.to_bytes())

    @classmethod
    def from_bytes(
        cls, data: bytes, *, layout: ParameterLayout | None = None, max_bytes: int | None = None
    ) -> Checkpoint:
        """Strictly decode canonical checkpoint bytes.

        Parameters
        ----------
        data
            The bytes (already checked against their committed hash by the caller).
        layout
            The task's layout: the checkpoint must have its digest, size and one AdamW step count
            per entry; moments of a parameter with step count 0 must be zero.
        max_bytes
            Reject longer inputs before parsing.

        Raises
        ------
        CheckpointError
            One line: bad magic or header, wrong layout, wrong size, non-finite values, a negative
            second moment, or non-canonical bytes.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CheckpointError(f"checkpoint must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if max_bytes is not None and len(data) > max_bytes:
            raise CheckpointError(f"checkpoint is {len(data)} bytes, more than the limit {max_bytes}")
        header, body = decode_checkpoint_header(data, len(data))
        numel = header["numel"]
        values = np.frombuffer(data, dtype="<f4", count=3 * numel, offset=body).astype(np.float32)
        if not np.isfinite(values).all():
            raise CheckpointError("checkpoint holds NaN or Inf")
        tensors = torch.from_numpy(values).view(3, numel)
        ckpt = cls(
            step=header["step"],
            layout_digest=bytes.fromhex(header["layout"][2:]),
            params=tensors[0],
            exp_avg=tensors[1],
            exp_avg_sq=tensors[2],
            adam_steps=tuple(header["adam_steps"]),
            optimizer=InnerHyperparameters.from_mapping(header["optimizer"]),
            dtype=header["dtype"],
            threads=header["threads"],
            rng_state=data[body + 12 * numel :],
            device=header.get("device", "cpu"),
            deterministic=header.get("deterministic", True),
        )
        if bool((ckpt.exp_avg_sq < 0).any()):
            raise CheckpointError("checkpoint has a negative AdamW second moment")
        if layout is not None:
            ckpt.check_layout(layout)
        if ckpt.to_bytes() != data:
            raise CheckpointError("checkpoint bytes are not canonical (header not in canonical JSON form)")
        return ckpt

    def check_layout(self, layout: ParameterLayout) -> None:
        """Raise CheckpointError unless the checkpoint belongs to ``layout``."""
        _check_layout_fields(self.layout_digest, self.numel, self.adam_steps, layout)
        fresh = [e for e, s in zip(layout.entries, self.adam_steps, strict=True) if s == 0]
        for e in fresh:
            span = slice(e.offset, e.offset + e.numel)
            if bool(self.exp_avg[span].any()) or bool(self.exp_avg_sq[span].any()):
                raise CheckpointError(f"parameter {e.name!r} has AdamW step 0 but non-zero moments")


_VECTORS = ("params", "exp_avg", "exp_avg_sq")
_FILE_BLOCK = 1 << 22


def _vector_name(vector: str) -> str:
    if vector not in _VECTORS:
        raise ValueError(f"a checkpoint's vectors are {', '.join(_VECTORS)}, not {vector!r}")
    return vector


@dataclass(frozen=True, eq=False)
class CheckpointFile:
    """A checkpoint in a file, checked exactly as :meth:`Checkpoint.from_bytes` checks bytes (same
    checks, same order, same one-line reasons) while reading it range by range: what a referee
    holds for a large model instead of three flat float32 vectors (12 bytes per parameter).
    Open with :meth:`open`; the vectors are read with :meth:`values`."""

    path: Path
    step: int
    layout_digest: bytes
    numel: int
    adam_steps: tuple[int, ...]
    optimizer: InnerHyperparameters
    dtype: str
    threads: int
    rng_state: bytes
    device: str
    deterministic: bool
    body: int

    @property
    def device_class(self) -> str:
        return f"{self.device}-{self.dtype}"

    @classmethod
    def open(cls, path: Path, *, layout: ParameterLayout | None = None, max_bytes: int | None = None) -> CheckpointFile:
        """Check the checkpoint file ``path``; raises CheckpointError (one line) where
        :meth:`Checkpoint.from_bytes` would on its bytes."""
        total = os.path.getsize(path)
        if max_bytes is not None and total > max_bytes:
            raise CheckpointError(f"checkpoint is {total} bytes, more than the limit {max_bytes}")
        with open(path, "rb") as fh:
            prefix = fh.read(16 + MAX_HEADER_BYTES)
        header, body = decode_checkpoint_header(prefix, total)
        numel = header["numel"]
        negative = False  # a negative second moment, reported after the scalar fields' checks
        with open(path, "rb") as fh:
            for start in range(0, 3 * numel, _FILE_BLOCK):
                count = min(_FILE_BLOCK, 3 * numel - start)
                fh.seek(body + 4 * start)
                block = np.frombuffer(fh.read(4 * count), dtype="<f4")
                if not np.isfinite(block).all():
                    raise CheckpointError("checkpoint holds NaN or Inf")
                # one pass over the file: the exp_avg_sq part of this block is [2 * numel, 3 * numel)
                negative = negative or bool((block[max(0, 2 * numel - start) :] < 0).any())
            fh.seek(body + 12 * numel)
            rng_state = fh.read()
        # the scalar fields, validated by the in-memory class itself (on a one-value stand-in)
        one = torch.zeros(1, dtype=torch.float32)
        fields = Checkpoint(
            step=header["step"],
            layout_digest=bytes.fromhex(header["layout"][2:]),
            params=one,
            exp_avg=one,
            exp_avg_sq=one,
            adam_steps=tuple(header["adam_steps"]),
            optimizer=InnerHyperparameters.from_mapping(header["optimizer"]),
            dtype=header["dtype"],
            threads=header["threads"],
            rng_state=rng_state,
            device=header.get("device", "cpu"),
            deterministic=header.get("deterministic", True),
        )
        ckpt = cls(
            Path(path),
            fields.step,
            fields.layout_digest,
            numel,
            fields.adam_steps,
            fields.optimizer,
            fields.dtype,
            fields.threads,
            fields.rng_state,
            fields.device,
            fields.deterministic,
            body,
        )
        if negative:
            raise CheckpointError("checkpoint has a negative AdamW second moment")
        if layout is not None:
            ckpt.check_layout(layout)
        canonical = checkpoint_header(
            step=ckpt.step,
            layout_digest=ckpt.layout_digest,
            numel=numel,
            adam_steps=ckpt.adam_steps,
            optimizer=ckpt.optimizer,
            dtype=ckpt.dtype,
            threads=ckpt.threads,
            rng_bytes=len(rng_state),
            device=ckpt.device,
            deterministic=ckpt.deterministic,
        )
        if canonical != prefix[:body]:  # the vectors are canonical once finite: only the header can differ
            raise CheckpointError("checkpoint bytes are not canonical (header not in canonical JSON form)")
        return ckpt

    def values(self, vector: str, start: int, stop: int) -> torch.Tensor:
        """Coordinates ``[start, stop)`` of ``vector`` (``params``, ``exp_avg`` or ``exp_avg_sq``)."""
        offset = self.body + 4 * (_VECTORS.index(_vector_name(vector)) * self.numel + start)
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(4 * (stop - start))
        return torch.from_numpy(np.frombuffer(data, dtype="<f4").astype(np.float32))

    def check_layout(self, layout: ParameterLayout) -> None:
        """:meth:`Checkpoint.check_layout`, reading the moments of fresh parameters from the file."""
        _check_layout_fields(self.layout_digest, self.numel, self.adam_steps, layout)
        for e, steps in zip(layout.entries, self.adam_steps, strict=True):
            if steps:
                continue
            for start in range(e.offset, e.offset + e.numel, _FILE_BLOCK):
                stop = min(start + _FILE_BLOCK, e.offset + e.numel)
                if bool(self.values("exp_avg", start, stop).any()) or bool(
                    self.values("exp_avg_sq", start, stop).any()
                ):
                    raise CheckpointError(f"parameter {e.name!r} has AdamW step 0 but non-zero moments")

    def to_checkpoint(self, layout: ParameterLayout | None = None) -> Checkpoint:
        """The whole checkpoint in memory (12 bytes per parameter: a tolerant comparison)."""
        return Checkpoint.from_bytes(self.path.read_bytes(), layout=layout)


CheckpointLike = Checkpoint | CheckpointFile
"""A checkpoint in memory or in a file: what a replay restores from and a referee reads."""


def checkpoint_hash(data: bytes) -> bytes:
    """keccak256 of a checkpoint's canonical bytes (equal to its blob digest, without ``0x``)."""
    return bytes(keccak(bytes(data)))


def checkpoint_root(hashes: Sequence[bytes]) -> bytes:
    """The committed ``checkpointRoot``: Merkle root over the checkpoint hashes, leaf ``i`` binding ``i``."""
    if not hashes:
        raise CheckpointError("a checkpoint root needs at least one checkpoint")
    for i, h in enumerate(hashes):
        if not isinstance(h, bytes) or len(h) != 32:
            raise CheckpointError(f"checkpoint hash {i} must be 32 bytes")
    return merkle.root(list(hashes))


# ---------------------------------------------------------------------- manifest


NOISE_ROOT_DOMAIN = b"syncline.dp.checkpoints"


def noise_bound_root(root: bytes, noise: bytes | None) -> bytes:
    """The checkpoint root itself without a noise commitment; bound with it otherwise."""
    if noise is None:
        return root
    return keccak(NOISE_ROOT_DOMAIN + root + noise)


def manifest_alias(task_id: int, round_: int, fragment: int) -> str:
    """Blob-store alias of a submission's manifest (aliases cannot contain ``/``): its candidates
    are hints, the trainer's signed slot first; keep one only if it opens the committed root."""
    return f"checkpoints:{task_id}:{round_}:{fragment}"


def manifest_root_alias(root: bytes) -> str:
    """Blob-store alias of a manifest by the checkpoint root it claims to open (candidates are
    hints: keep one only if it opens ``root``)."""
    return "checkpoints:0x" + bytes(root).hex()


def _root_bytes(root: bytes | str) -> bytes:
    if isinstance(root, str):
        text = root.lower()
        if _HEX32.fullmatch(text) is None:
            raise CheckpointError(f"checkpoint root {root!r} is not 0x + 64 hex")
        return bytes.fromhex(text[2:])
    if not isinstance(root, bytes) or len(root) != 32:
        raise CheckpointError("checkpoint root must be 32 bytes")
    return root


@dataclass(frozen=True)
class CheckpointManifest:
    """Where a submission's checkpoints are: their hashes (what the root commits) and locators."""

    interval: int
    inner_steps: int
    hashes: tuple[bytes, ...]
    uris: tuple[str, ...]
    noise: bytes | None = None
    """A DP task's per-round noise commitment (``privacy/noise.py``), bound into :attr:`root`;
    None (and absent from the JSON) in a task without ``privacy``."""

    def __post_init__(self) -> None:
        if self.noise is not None and (not isinstance(self.noise, bytes) or len(self.noise) != 32):
            raise CheckpointError("manifest noise commitment must be 32 bytes")
        count = segment_count(self.inner_steps, self.interval)
        if not isinstance(self.hashes, tuple) or len(self.hashes) != count + 1:
            got = len(self.hashes) if isinstance(self.hashes, tuple) else type(self.hashes).__name__
            raise CheckpointError(f"manifest needs {count + 1} checkpoint hashes (S={count} segments), got {got}")
        if any(not isinstance(h, bytes) or len(h) != 32 for h in self.hashes):
            raise CheckpointError("manifest hashes must be 32 bytes each")
        if not isinstance(self.uris, tuple) or len(self.uris) != len(self.hashes):
            raise CheckpointError("manifest needs one uri per checkpoint")
        if any(not isinstance(u, str) or len(u) > MAX_URI_CHARS for u in self.uris):
            raise CheckpointError(f"manifest uris must be strings of at most {MAX_URI_CHARS} characters")

    @property
    def segments(self) -> int:
        """``S``: the number of training segments (the derivation segment has index ``S``)."""
        return len(self.hashes) - 1

    @property
    def root(self) -> bytes:
        """``checkpointRoot``; with a noise commitment ``n`` (DP tasks, docs/protocol.md §12.10),
        ``keccak256("syncline.dp.checkpoints" ‖ checkpoint_root(hashes) ‖ n)``."""
        return noise_bound_root(checkpoint_root(self.hashes), self.noise)

    def digest(self, index: int) -> str:
        """Blob digest (``0x`` + hex) of checkpoint ``index``."""
        return "0x" + self.hashes[index].hex()

    def verify_against(self, root: bytes | str) -> None:
        """Raise CheckpointError unless the manifest's hashes have the committed ``root``."""
        expected = _root_bytes(root)
        if self.root != expected:
            raise CheckpointError(
                f"manifest hashes have root 0x{self.root.hex()}, the commitment is 0x{expected.hex()}"
            )

    def check_task(self, inner_steps: int, interval: int) -> None:
        """Raise CheckpointError unless the manifest uses the task's ``inner_steps`` and ``interval``."""
        if (self.inner_steps, self.interval) != (inner_steps, interval):
            raise CheckpointError(
                f"manifest has inner_steps={self.inner_steps}, interval={self.interval}; "
                f"the task has {inner_steps}, {interval}"
            )

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace, ASCII)."""
        data = {
            "format": MANIFEST_FORMAT,
            "hashes": ["0x" + h.hex() for h in self.hashes],
            "inner_steps": self.inner_steps,
            "interval": self.interval,
            "uris": list(self.uris),
        }
        if self.noise is not None:
            data["noise"] = "0x" + self.noise.hex()
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes) -> CheckpointManifest:
        """Parse a manifest; raises CheckpointError (one line) on anything malformed."""
        if not isinstance(data, bytes | bytearray) or len(data) > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"manifest must be at most {MAX_MANIFEST_BYTES} bytes")
        try:
            raw = load_bounded_json(data, max_bytes=MAX_MANIFEST_BYTES, max_depth=2, what="manifest")
        except WireFormatError as exc:
            raise CheckpointError(str(exc)) from None
        keys = ("format", "hashes", "inner_steps", "interval", "uris")
        if not isinstance(raw, dict) or sorted(k for k in raw if k != "noise") != list(keys):
            raise CheckpointError(f"manifest must have exactly the keys {', '.join(keys)} (and noise in a DP task)")
        noise = raw.get("noise")
        if "noise" in raw and not (isinstance(noise, str) and _HEX32.fullmatch(noise)):
            raise CheckpointError("manifest noise must be 0x + 64 lowercase hex")
        if raw["format"] != MANIFEST_FORMAT:
            raise CheckpointError(f"manifest format {raw['format']!r} != {MANIFEST_FORMAT!r}")
        hashes, uris = raw["hashes"], raw["uris"]
        if not isinstance(hashes, list) or not all(isinstance(h, str) and _HEX32.fullmatch(h) for h in hashes):
            raise CheckpointError("manifest hashes must be a list of 0x + 64 lowercase hex strings")
        if not isinstance(uris, list):
            raise CheckpointError("manifest uris must be a list")
        return cls(
            interval=raw["interval"],
            inner_steps=raw["inner_steps"],
            hashes=tuple(bytes.fromhex(h[2:]) for h in hashes),
            uris=tuple(uris),
            noise=None if noise is None else bytes.fromhex(noise[2:]),
        )
