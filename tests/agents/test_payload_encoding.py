"""The wire encodings agents hash must be canonical: the same gradient (or state) has to give the
same bytes, hence the same keccak, in every process.

A trainer commits ``keccak(payload)`` on chain and a re-executor (``round_seed`` exists so that
anyone can recompute a trainer's round from public data) can only check a commitment by
re-encoding the gradient it recomputed; the exported model's ``weights_keccak`` is the keccak of
the state encoding. Both encoders go through ``fixed_point.write_safetensors`` (sorted header,
fixed padding): the reference ``safetensors.torch.save`` serializes its ``__metadata__`` map in
Rust ``HashMap`` order, which is randomized per map instance.
"""

from __future__ import annotations

import torch
from eth_utils import keccak

from syncline.protocol.quantization import QuantizedGradient, quantize
from syncline.protocol.state import TrainingState


def test_equal_gradients_encode_to_equal_bytes() -> None:
    qg = quantize(torch.linspace(-1, 1, 1000), 8)
    hashes = {keccak(qg.to_safetensors_bytes()) for _ in range(30)}
    # Whatever the bytes, they decode to the same gradient (the witnesses' view is unaffected).
    assert QuantizedGradient.from_safetensors_bytes(qg.to_safetensors_bytes(), expected_numel=1000) == qg
    assert len(hashes) == 1, f"one gradient, {len(hashes)} different payload hashes"


def test_equal_states_encode_to_equal_bytes() -> None:
    state = TrainingState.from_model_state_dict({"w": torch.linspace(-1, 1, 700)})
    hashes = {keccak(state.to_bytes()) for _ in range(30)}
    assert TrainingState.from_bytes(state.to_bytes()) == state
    assert len(hashes) == 1, f"one state, {len(hashes)} different blob digests"
