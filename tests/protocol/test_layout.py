"""Canonical parameter layout: order, round trips, mismatches and the digest."""

from __future__ import annotations

import json

import pytest
import torch
from eth_utils import keccak

from syncline.protocol.layout import ParameterLayout


def model_sd() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "lm_head.weight": torch.randn(4, 3, generator=g),
        "blocks.0.attn.weight": torch.randn(3, 3, generator=g).to(torch.bfloat16),
        "blocks.0.ln.bias": torch.randn(3, generator=g).to(torch.float16),
        "Embed.weight": torch.randn(5, 3, generator=g, dtype=torch.float64),
        "scalar": torch.tensor(0.25),
    }


def test_entries_are_sorted_with_contiguous_offsets() -> None:
    layout = ParameterLayout.from_state_dict(model_sd())
    assert layout.names == ("Embed.weight", "blocks.0.attn.weight", "blocks.0.ln.bias", "lm_head.weight", "scalar")
    assert [e.offset for e in layout.entries] == [0, 15, 24, 27, 39]
    assert layout.numel == 40
    assert [e.dtype for e in layout.entries] == ["float64", "bfloat16", "float16", "float32", "float32"]


def test_flatten_concatenates_in_canonical_order() -> None:
    sd = model_sd()
    layout = ParameterLayout.from_state_dict(sd)
    flat = layout.flatten(sd)
    assert flat.dtype == torch.float32 and flat.shape == (40,)
    assert torch.equal(flat[15:24], sd["blocks.0.attn.weight"].float().reshape(-1))
    assert torch.equal(flat[27:39], sd["lm_head.weight"].reshape(-1))
    assert flat[39].item() == 0.25
    # Insertion order of the state dict does not matter.
    reordered = dict(reversed(list(sd.items())))
    assert torch.equal(ParameterLayout.from_state_dict(reordered).flatten(reordered), flat)


def test_unflatten_restores_shapes_and_dtypes() -> None:
    sd = model_sd()
    layout = ParameterLayout.from_state_dict(sd)
    back = layout.unflatten(layout.flatten(sd))
    assert list(back) == list(layout.names)
    for name, tensor in sd.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape
        # bf16/f16 widen exactly to float32 and narrow back; float64 round-trips through float32.
        assert torch.equal(back[name], tensor.float().to(tensor.dtype))
    with pytest.raises(ValueError, match=r"needs \(40,\)"):
        layout.unflatten(torch.zeros(39))


def test_mismatches_name_the_parameter() -> None:
    sd = model_sd()
    layout = ParameterLayout.from_state_dict(sd)
    with pytest.raises(ValueError, match="'scalar' is missing"):
        layout.flatten({k: v for k, v in sd.items() if k != "scalar"})
    with pytest.raises(ValueError, match="'extra' is not in the layout"):
        layout.flatten({**sd, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"'lm_head.weight': shape \(3, 4\)"):
        layout.flatten({**sd, "lm_head.weight": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match=r"'buf': unsupported type torch\.int64"):
        ParameterLayout.from_state_dict({"buf": torch.zeros(2, dtype=torch.int64)})


def test_mapping_round_trip_and_validation() -> None:
    layout = ParameterLayout.from_state_dict(model_sd())
    mapping = json.loads(json.dumps(layout.to_mapping()))
    assert ParameterLayout.from_mapping(mapping) == layout
    unsorted = {**mapping, "params": list(reversed(mapping["params"]))}
    with pytest.raises(ValueError, match="sorted"):
        ParameterLayout.from_mapping(unsorted)
    with pytest.raises(ValueError, match="version"):
        ParameterLayout.from_mapping({**mapping, "version": 2})
    bad_dtype = {**mapping, "params": [{"name": "a", "shape": [1], "dtype": "int8"}]}
    with pytest.raises(ValueError, match="unsupported dtype"):
        ParameterLayout.from_mapping(bad_dtype)
    bad_shape = {**mapping, "params": [{"name": "a", "shape": [-1], "dtype": "float32"}]}
    with pytest.raises(ValueError, match="invalid shape"):
        ParameterLayout.from_mapping(bad_shape)


def test_digest_is_keccak_of_the_documented_json() -> None:
    layout = ParameterLayout.from_state_dict({"b": torch.zeros(2, 3), "a": torch.zeros(4, dtype=torch.float16)})
    expected_json = (
        b'{"params":[{"dtype":"float16","name":"a","shape":[4]},'
        b'{"dtype":"float32","name":"b","shape":[2,3]}],"version":1}'
    )
    assert layout.canonical_json() == expected_json
    assert layout.digest() == keccak(expected_json)
    other = ParameterLayout.from_state_dict({"b": torch.zeros(3, 2), "a": torch.zeros(4, dtype=torch.float16)})
    assert other.digest() != layout.digest()
