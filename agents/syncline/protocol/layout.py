"""Canonical flattening of a model's parameters into one vector.

Every party must agree on which coordinate of the flat vector is which parameter entry. The
layout sorts parameter names lexicographically (Python string order, i.e. by code point) and
concatenates each tensor flattened in row-major order. It records each tensor's shape and
dtype so :meth:`ParameterLayout.unflatten` can rebuild a state dict, and its canonical JSON
(sorted keys, no whitespace) is hashed with keccak256 into :meth:`ParameterLayout.digest`.

Only floating tensors are accepted: filter integer/bool buffers out of a state dict before
building a layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from syncline.protocol.hashing import keccak

LAYOUT_VERSION = 1
_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a layout entry's dtype name (``float32``, ``bfloat16``, ...)."""
    return _DTYPES[name]


@dataclass(frozen=True)
class ParameterEntry:
    """One parameter: its name, shape, dtype name and position in the flat vector."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def numel(self) -> int:
        """Number of coordinates of this parameter."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class ParameterLayout:
    """Sorted parameter entries with contiguous offsets (build with the class methods)."""

    entries: tuple[ParameterEntry, ...]

    def __post_init__(self) -> None:
        names = [e.name for e in self.entries]
        if not names:
            raise ValueError("a parameter layout needs at least one parameter")
        if names != sorted(names) or len(set(names)) != len(names):
            raise ValueError("layout entries must have unique names in sorted order")
        offset = 0
        for e in self.entries:
            if e.dtype not in _DTYPES:
                raise ValueError(f"parameter {e.name!r}: unsupported dtype {e.dtype!r}")
            if any(not isinstance(s, int) or s < 0 for s in e.shape):
                raise ValueError(f"parameter {e.name!r}: invalid shape {e.shape}")
            if e.offset != offset:
                raise ValueError(f"parameter {e.name!r}: offset {e.offset} != expected {offset}")
            offset += e.numel
        if offset == 0:
            raise ValueError("a parameter layout needs at least one coordinate")

    @classmethod
    def _build(cls, items: list[tuple[str, tuple[int, ...], str]]) -> ParameterLayout:
        entries, offset = [], 0
        for name, shape, dtype in sorted(items):
            entries.append(ParameterEntry(name=name, shape=shape, dtype=dtype, offset=offset))
            offset += math.prod(shape)
        return cls(entries=tuple(entries))

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor]) -> ParameterLayout:
        """Layout of a state dict (floating tensors only)."""
        items = []
        for name, tensor in sd.items():
            if not isinstance(tensor, torch.Tensor) or tensor.dtype not in _DTYPE_NAMES:
                kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise ValueError(f"parameter {name!r}: unsupported type {kind} (floating tensors only)")
            items.append((str(name), tuple(int(s) for s in tensor.shape), _DTYPE_NAMES[tensor.dtype]))
        return cls._build(items)

    @property
    def numel(self) -> int:
        """Total number of coordinates."""
        last = self.entries[-1]
        return last.offset + last.numel

    @property
    def names(self) -> tuple[str, ...]:
        """Parameter names in canonical order."""
        return tuple(e.name for e in self.entries)

    def _check_names(self, sd: Mapping[str, torch.Tensor]) -> None:
        missing = sorted(set(self.names) - set(sd))
        unexpected = sorted(set(sd) - set(self.names))
        if missing:
            raise ValueError(f"parameter {missing[0]!r} is missing from the state dict")
        if unexpected:
            raise ValueError(f"parameter {unexpected[0]!r} is not in the layout")

    def flatten(self, sd: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Concatenate the parameters in canonical order into a float32 1-D tensor."""
        self._check_names(sd)
        parts = []
        for e in self.entries:
            t = sd[e.name]
            if tuple(t.shape) != e.shape:
                raise ValueError(f"parameter {e.name!r}: shape {tuple(t.shape)} != layout {e.shape}")
            if not t.is_floating_point():
                raise ValueError(f"parameter {e.name!r}: dtype {t.dtype} is not floating")
            parts.append(t.detach().reshape(-1).to(torch.float32))
        return torch.cat(parts)

    def unflatten(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split a flat vector into ``name -> tensor`` with each parameter's shape and dtype."""
        if vec.dim() != 1 or vec.numel() != self.numel:
            raise ValueError(f"flat vector has shape {tuple(vec.shape)}, the layout needs ({self.numel},)")
        return {
            e.name: vec[e.offset : e.offset + e.numel].reshape(e.shape).to(_DTYPES[e.dtype]).clone()
            for e in self.entries
        }

    def to_mapping(self) -> dict[str, Any]:
        """JSON-able description (offsets are implied by the order)."""
        return {
            "version": LAYOUT_VERSION,
            "params": [{"name": e.name, "shape": list(e.shape), "dtype": e.dtype} for e in self.entries],
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ParameterLayout:
        """Inverse of :meth:`to_mapping`; raises ValueError on anything malformed."""
        if not isinstance(data, Mapping) or data.get("version") != LAYOUT_VERSION:
            raise ValueError(f"layout mapping must have version {LAYOUT_VERSION}")
        params = data.get("params")
        if not isinstance(params, list):
            raise ValueError("layout mapping needs a 'params' list")
        items = []
        for p in params:
            if not isinstance(p, Mapping) or set(p) != {"name", "shape", "dtype"}:
                raise ValueError(f"layout entry {p!r} must have exactly name, shape, dtype")
            name, shape, dtype = p["name"], p["shape"], p["dtype"]
            if not isinstance(name, str) or not isinstance(shape, list) or not isinstance(dtype, str):
                raise ValueError(f"layout entry {p!r} has wrong field types")
            if any(isinstance(s, bool) or not isinstance(s, int) for s in shape):
                raise ValueError(f"parameter {name!r}: shape {shape} must be integers")
            items.append((name, tuple(shape), dtype))
        layout = cls._build(items)
        if [e.name for e in layout.entries] != [p["name"] for p in params]:
            raise ValueError("layout mapping params must be sorted by name")
        return layout

    def canonical_json(self) -> bytes:
        """Sorted-key, whitespace-free UTF-8 JSON of :meth:`to_mapping`."""
        return json.dumps(self.to_mapping(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def digest(self) -> bytes:
        """keccak256 of :meth:`canonical_json` (32 bytes)."""
        return bytes(keccak(self.canonical_json()))
