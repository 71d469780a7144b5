"""The training state witnesses agree on: Q32 weights and outer momentum, with a Merkle root.

``TrainingState`` pairs a :class:`~syncline.protocol.layout.ParameterLayout` with int64 Q32
``weights`` and ``momentum`` vectors (``|x| <= STATE_MAX = 2**46 - 1``; the outer step saturates
there, see :mod:`syncline.protocol.outer_optimizer`). Its commitment :meth:`state_root` is the
Merkle root over state chunks (chunk ``i`` = weights slice ``i`` then momentum slice ``i``, each
8-byte big-endian; see :mod:`syncline.protocol.chunking`), so one leaf holds everything the
outer step on chunk ``i`` needs. :meth:`apply_round` is the exact, saturating outer Nesterov step
of :mod:`syncline.protocol.outer_optimizer`.

Wire format: safetensors with I64 tensors ``weights`` and ``momentum`` of shape ``[numel]`` and
metadata ``format = "syncline-state-v1"`` and ``layout`` (the layout's canonical JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from syncline.protocol.chunking import state_chunk_root
from syncline.protocol.fixed_point import (
    MAX_SAFETENSORS_HEADER,
    check_abs_bound,
    check_int64,
    from_fixed,
    read_safetensors,
    safetensors_metadata,
    to_fixed,
    write_safetensors,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.outer_optimizer import STATE_BOUND_BITS, nesterov_step
from syncline.protocol.wire import load_bounded_json

STATE_FORMAT = "syncline-state-v1"


@dataclass(frozen=True, eq=False)
class TrainingState:
    """Layout plus Q32 weights and momentum (validated on construction)."""

    layout: ParameterLayout
    weights: torch.Tensor
    momentum: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("weights", "momentum"):
            t = getattr(self, name)
            check_int64(t, name, ndim=1)
            if t.numel() != self.layout.numel:
                raise ValueError(f"{name} has {t.numel()} coordinates, the layout has {self.layout.numel}")
            check_abs_bound(t, 1 << STATE_BOUND_BITS, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TrainingState):
            return NotImplemented
        return (
            self.layout == other.layout
            and torch.equal(self.weights, other.weights)
            and torch.equal(self.momentum, other.momentum)
        )

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_model_state_dict(
        cls, sd: Mapping[str, torch.Tensor], layout: ParameterLayout | None = None
    ) -> TrainingState:
        """Initial state of a model: weights on the Q32 grid, momentum zero."""
        layout = layout or ParameterLayout.from_state_dict(sd)
        weights = to_fixed(layout.flatten(sd))
        return cls(layout=layout, weights=weights, momentum=torch.zeros_like(weights))

    def to_state_dict(self) -> dict[str, torch.Tensor]:
        """Parameters as float tensors shaped (and typed) per the layout."""
        return self.layout.unflatten(from_fixed(self.weights))

    def apply_round(self, aggregate: torch.Tensor, lr_ppm: int, mom_ppm: int) -> TrainingState:
        """State after one outer step with the round's aggregated outer gradient (Q32 int64).

        Never fails on a valid state and aggregate: weights and momentum saturate at
        ``+-(2**46 - 1)`` (issue 10, finding 9).
        """
        weights, momentum = nesterov_step(self.weights, self.momentum, aggregate, lr_ppm, mom_ppm)
        return TrainingState(layout=self.layout, weights=weights, momentum=momentum)

    def state_root(self) -> bytes:
        """Merkle root (32 bytes) over the state chunks."""
        return state_chunk_root(self.weights, self.momentum)

    @property
    def state_root_hex(self) -> str:
        """``0x``-prefixed hex of :meth:`state_root`."""
        return "0x" + self.state_root().hex()

    def to_bytes(self) -> bytes:
        """Serialize to safetensors (see the module docstring)."""
        metadata = {"format": STATE_FORMAT, "layout": self.layout.canonical_json().decode()}
        tensors = {"weights": self.weights.contiguous(), "momentum": self.momentum.contiguous()}
        return write_safetensors(tensors, metadata)

    @classmethod
    def from_bytes(
        cls, data: bytes, *, expected_layout: ParameterLayout | None = None, max_bytes: int | None = None
    ) -> TrainingState:
        """Decode and validate a serialized state.

        Parameters
        ----------
        data
            safetensors bytes.
        expected_layout
            If given, the embedded layout must equal it.
        max_bytes
            Reject longer payloads before parsing (defaults to a bound derived from
            ``expected_layout`` when given).

        Raises
        ------
        ValueError
            With a one-line reason.
        """
        if max_bytes is None and expected_layout is not None:
            max_bytes = 8 + MAX_SAFETENSORS_HEADER + 16 * expected_layout.numel
        meta = safetensors_metadata(data, max_bytes=max_bytes)
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"state format {meta.get('format')!r} != {STATE_FORMAT!r}")
        layout = ParameterLayout.from_mapping(
            load_bounded_json(
                meta.get("layout", ""), max_bytes=MAX_SAFETENSORS_HEADER, max_depth=4, what="state metadata 'layout'"
            )
        )
        if expected_layout is not None and layout != expected_layout:
            raise ValueError("state layout differs from the expected layout")
        shape = (layout.numel,)
        tensors, _ = read_safetensors(
            data, {"weights": (torch.int64, shape), "momentum": (torch.int64, shape)}, max_bytes=max_bytes
        )
        return cls(layout=layout, weights=tensors["weights"], momentum=tensors["momentum"])
