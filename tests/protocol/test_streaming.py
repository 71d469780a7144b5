"""Streaming round computation: byte-identical to ``compute_round`` for the coordinate-wise rules,
whatever the chunk range (Hypothesis), with bounded working memory per range."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from eth_utils import keccak
from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol.aggregation import Krum, make_rule
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.quantization import quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import stream_round
from syncline.protocol.sync_round import CommittedSubmission, compute_round

RULES = [
    (AggregationRule.MEAN, 0),
    (AggregationRule.TRIMMED_MEAN, 2_000),
    (AggregationRule.COORDINATE_MEDIAN, 0),
]


@settings(max_examples=40, deadline=None)
@given(
    numel=st.integers(1, 2_000),
    n=st.integers(1, 7),
    bits=st.sampled_from([8, 16]),
    rule_index=st.integers(0, len(RULES) - 1),
    range_chunks=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-6, 1e-2, 1.0, 100.0]),
    lr_ppm=st.sampled_from([700_000, 1, 2**32 - 1]),
    mom_ppm=st.sampled_from([900_000, 0, 999_999]),
)
def test_streamed_round_is_compute_round_byte_for_byte(
    numel: int,
    n: int,
    bits: int,
    rule_index: int,
    range_chunks: int,
    seed: int,
    scale: float,
    lr_ppm: int,
    mom_ppm: int,
) -> None:
    rule, param = RULES[rule_index]
    gen = torch.Generator().manual_seed(seed)
    previous = TrainingState.from_model_state_dict({"p": torch.randn(numel, generator=gen) * 4})
    gradients = [quantize(torch.randn(numel, generator=gen) * scale, bits) for _ in range(n)]
    subs = []
    for fragment, qg in enumerate(gradients):
        data = qg.to_safetensors_bytes()
        subs.append(CommittedSubmission(fragment, keccak(data), gradient_chunk_root(qg), data))
    expected = compute_round(
        previous,
        subs,
        rule=rule,
        rule_param=param,
        bits=bits,
        lr_ppm=lr_ppm,
        momentum_ppm=mom_ppm,
        max_payload_bytes=numel * 2 + 2**20,
    )
    got = stream_round(
        previous.weights.numpy(),
        previous.momentum.numpy(),
        gradients,
        make_rule(rule, param),
        lr_ppm,
        mom_ppm,
        range_chunks=range_chunks,
    )
    assert got.state_root == expected.state_root
    assert got.aggregate_root == expected.aggregate_root
    assert np.array_equal(got.weights, expected.state.weights.numpy())
    assert np.array_equal(got.momentum, expected.state.momentum.numpy())


def test_streaming_writes_into_memory_mapped_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    numel = 5_000
    gen = torch.Generator().manual_seed(1)
    previous = TrainingState.from_model_state_dict({"p": torch.randn(numel, generator=gen)})
    gradients = [quantize(torch.randn(numel, generator=gen) * 1e-2, 8) for _ in range(3)]
    w_in = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.int64, shape=(numel,))
    m_in = np.lib.format.open_memmap(tmp_path / "m.npy", mode="w+", dtype=np.int64, shape=(numel,))
    w_in[:], m_in[:] = previous.weights.numpy(), previous.momentum.numpy()
    w_out = np.lib.format.open_memmap(tmp_path / "w2.npy", mode="w+", dtype=np.int64, shape=(numel,))
    m_out = np.lib.format.open_memmap(tmp_path / "m2.npy", mode="w+", dtype=np.int64, shape=(numel,))
    rule = make_rule(AggregationRule.COORDINATE_MEDIAN, 0)
    got = stream_round(
        w_in, m_in, gradients, rule, 700_000, 900_000, range_chunks=3, out_weights=w_out, out_momentum=m_out
    )
    assert got.weights is w_out
    in_memory = stream_round(previous.weights.numpy(), previous.momentum.numpy(), gradients, rule, 700_000, 900_000)
    assert (got.state_root, got.aggregate_root) == (in_memory.state_root, in_memory.aggregate_root)
    assert np.array_equal(np.load(tmp_path / "w2.npy", mmap_mode="r"), in_memory.weights)


def test_whole_vector_rules_and_bad_arguments_are_refused() -> None:
    qg = quantize(torch.zeros(10), 8)
    w = np.zeros(10, dtype=np.int64)
    with pytest.raises(ValueError, match="not coordinate-wise"):
        stream_round(w, w, [qg], Krum(0), 700_000, 900_000)
    with pytest.raises(ValueError, match="no gradient"):
        stream_round(w, w, [], make_rule(AggregationRule.MEAN, 0), 700_000, 900_000)
    with pytest.raises(ValueError, match="range_chunks"):
        stream_round(w, w, [qg], make_rule(AggregationRule.MEAN, 0), 700_000, 900_000, range_chunks=0)
