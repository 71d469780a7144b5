"""A training state kept in a file: what agents hold for a large model instead of a
:class:`~syncline.protocol.state.TrainingState` in memory.

A state blob of ``P`` parameters is ``16 P`` bytes (Q32 weights and momentum); decoding it into
tensors and re-encoding the next one used to hold the bytes and the tensors at once (about
``64 P`` bytes at the peak: 8 GB for a 124M model). A :class:`StateFile` is the same safetensors
blob on disk (``syncline-state-v1``, byte for byte what :meth:`TrainingState.to_bytes` writes),
opened after its header was checked. Agents stream it:

* the round is computed in place with
  :func:`syncline.protocol.disk_round.compute_round_on_disk` over a copy of the previous state's
  file (the payloads in files too), and the new file is published with ``put_file``;
* its root is recomputed range by range (:func:`~syncline.protocol.disk_round.state_root_on_disk`)
  when the file was downloaded;
* a model's weights are loaded parameter by parameter (:meth:`StateFile.load_into`).

Resident memory stays at one range of the state whatever its size.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from syncline.modality.lora import trained_parameters
from syncline.protocol.disk_round import state_root_on_disk
from syncline.protocol.fixed_point import (
    CHUNK_SIZE,
    MAX_SAFETENSORS_HEADER,
    ONE,
    safetensors_metadata,
    safetensors_spans,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.outer_optimizer import STATE_BOUND_BITS
from syncline.protocol.state import STATE_FORMAT, TrainingState
from syncline.protocol.streaming import DEFAULT_RANGE_CHUNKS, FileRegion
from syncline.protocol.wire import load_bounded_json

DISK_STATE_MIN_NUMEL = 1 << 22
"""From this many parameters up (4M: a 64 MiB state) agents keep the state in a file by default."""
_LOAD_BLOCK = 1 << 22


@dataclass
class StateFile:
    """A state blob in the file ``path`` whose header matches ``layout`` (use :meth:`open`)."""

    path: Path
    layout: ParameterLayout
    weights_offset: int
    momentum_offset: int
    _root: bytes | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: Path, layout: ParameterLayout) -> StateFile:
        """Check the header of the state file ``path`` against ``layout`` (as
        :meth:`TrainingState.from_bytes` does, without reading the tensors); raises ValueError."""
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            prefix = fh.read(8 + MAX_SAFETENSORS_HEADER)
        max_bytes = 8 + MAX_SAFETENSORS_HEADER + 16 * layout.numel
        meta = safetensors_metadata(prefix, max_bytes=max_bytes, total_len=size)
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"state format {meta.get('format')!r} != {STATE_FORMAT!r}")
        embedded = ParameterLayout.from_mapping(
            load_bounded_json(
                meta.get("layout", ""), max_bytes=MAX_SAFETENSORS_HEADER, max_depth=4, what="state metadata 'layout'"
            )
        )
        if embedded != layout:
            raise ValueError("state layout differs from the expected layout")
        shape = (layout.numel,)
        spans, _ = safetensors_spans(
            prefix, size, {"weights": (torch.int64, shape), "momentum": (torch.int64, shape)}, max_bytes=max_bytes
        )
        return cls(Path(path), layout, spans["weights"][0], spans["momentum"][0])

    @classmethod
    def write(cls, state: TrainingState, path: Path) -> StateFile:
        """Write ``state`` to ``path`` (small states: tests, and the in-memory path's hand-over)."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(state.to_bytes())
        os.replace(tmp, path)
        opened = cls.open(path, state.layout)
        opened._root = state.state_root()
        return opened

    # ------------------------------------------------------------------ reading

    def regions(self, *, writable: bool = False) -> tuple[FileRegion, FileRegion]:
        """``(weights, momentum)`` as int64 file regions (``writable``: updated in place)."""
        numel = self.layout.numel
        return (
            FileRegion(str(self.path), self.weights_offset, numel, writable=writable),
            FileRegion(str(self.path), self.momentum_offset, numel, writable=writable),
        )

    def state_root(self) -> bytes:
        """The Merkle root of the state, computed range by range (once; then remembered). Raises
        ValueError when a coordinate exceeds the state bound (as :class:`TrainingState` does)."""
        if self._root is None:
            weights, momentum = self.regions()
            try:
                self._check_bound(weights, "weights")
                self._check_bound(momentum, "momentum")
                self._root = state_root_on_disk(weights, momentum)
            finally:
                weights.close()
                momentum.close()
        return self._root

    @property
    def state_root_hex(self) -> str:
        return "0x" + self.state_root().hex()

    def adopt_root(self, root: bytes) -> None:
        """Record the root a round computation just reported for this file (no re-hashing)."""
        self._root = root

    def _check_bound(self, region: FileRegion, name: str) -> None:
        bound = 1 << STATE_BOUND_BITS
        step = DEFAULT_RANGE_CHUNKS * CHUNK_SIZE
        for start in range(0, region.numel, step):
            values = region.read(start, min(start + step, region.numel))
            if values.size and int(np.abs(values).max()) >= bound:
                raise ValueError(f"{name} exceeds the state bound 2**{STATE_BOUND_BITS}")

    def load_into(self, model: torch.nn.Module) -> None:
        """Copy the Q32 weights into ``model``'s parameters as float32 (exactly what
        :func:`syncline.run.context.load_weights` does with a :class:`TrainingState`), one
        parameter block at a time."""
        params = trained_parameters(model)
        weights, _ = self.regions()
        try:
            with torch.no_grad():
                for e in self.layout.entries:
                    flat = params[e.name].view(-1)
                    for start in range(0, e.numel, _LOAD_BLOCK):
                        stop = min(start + _LOAD_BLOCK, e.numel)
                        q = weights.read(e.offset + start, e.offset + stop)
                        values = (q.astype(np.float64) / float(ONE)).astype(np.float32)
                        flat[start:stop].copy_(torch.from_numpy(values))
        finally:
            weights.close()

    def to_state(self) -> TrainingState:
        """The whole state in memory (small states only: tests, the court)."""
        return TrainingState.from_bytes(self.path.read_bytes(), expected_layout=self.layout)

    # ------------------------------------------------------------------ files

    def copy_to(self, path: Path) -> StateFile:
        """A copy of this file at ``path`` (to be updated in place by the next round)."""
        shutil.copyfile(self.path, path)
        return StateFile(Path(path), self.layout, self.weights_offset, self.momentum_offset, self._root)

    def move_to(self, path: Path) -> StateFile:
        os.replace(self.path, path)
        self.path = Path(path)
        return self

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def use_disk_state(numel: int, setting: bool | None) -> bool:
    """Whether an agent keeps the state of a ``numel``-parameter model in a file: its config's
    ``state_on_disk`` when set, else from :data:`DISK_STATE_MIN_NUMEL` parameters up."""
    return numel >= DISK_STATE_MIN_NUMEL if setting is None else setting
