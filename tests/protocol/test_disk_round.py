"""Rounds on disk (issue 12): a state and payload files give the same bytes, the same verdicts and
the same one-line reasons as the in-memory round, and the trainer's streamed encoding is the
canonical payload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.disk_round import PayloadFile, compute_round_on_disk, encode_payload_file, state_root_on_disk
from syncline.protocol.enums import AggregationRule
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import QuantizedGradient, quantize
from syncline.protocol.state import TrainingState
from syncline.protocol.streaming import ArrayRegion, FileRegion
from syncline.protocol.sync_round import CHUNK_ROOT_MISMATCH, HASH_MISMATCH, CommittedSubmission, compute_round


@settings(max_examples=30, deadline=None)
@given(
    numel=st.integers(1, 3_000),
    bits=st.sampled_from([8, 16]),
    range_chunks=st.sampled_from([1, 2, 8, 256]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_streamed_encoding_is_the_canonical_payload(
    tmp_path_factory: pytest.TempPathFactory, numel: int, bits: int, range_chunks: int, seed: int
) -> None:
    g = torch.randn(numel, generator=torch.Generator().manual_seed(seed)) * 0.03
    g[::5] = 0
    path = tmp_path_factory.mktemp("enc") / "p"
    encoded = encode_payload_file(ArrayRegion(g.numpy()), bits, str(path), range_chunks=range_chunks)
    qg = quantize(g, bits)
    expected = qg.to_safetensors_bytes()
    assert path.read_bytes() == expected
    assert (encoded.payload_hash, encoded.chunk_root, encoded.size) == (
        keccak(expected),
        gradient_chunk_root(qg),
        len(expected),
    )


def test_nan_is_refused_by_the_streamed_encoding(tmp_path: Path) -> None:
    g = np.zeros(1000, dtype=np.float32)
    g[700] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        encode_payload_file(ArrayRegion(g), 8, str(tmp_path / "p"))


def _bad_payloads(numel: int, good: bytes, qg: QuantizedGradient) -> dict[str, bytes]:
    values = qg.values.clone()
    values[3] = -128
    out_of_range = QuantizedGradient.__new__(QuantizedGradient)
    object.__setattr__(out_of_range, "bits", 8)
    object.__setattr__(out_of_range, "values", values)
    object.__setattr__(out_of_range, "exponents", qg.exponents)
    return {
        "malformed": b"\x00" * 8 + good[8:],
        "truncated": good[:-1],
        "wide": quantize(torch.ones(numel) * 0.01, 16).to_safetensors_bytes(),
        "out_of_range": out_of_range.to_safetensors_bytes(),
        "oversized": good + b"\x00" * 70_000,
    }


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    ("rule", "param"),
    [
        (AggregationRule.COORDINATE_MEDIAN, 0),
        (AggregationRule.TRIMMED_MEAN, 2_000),
        (AggregationRule.MULTI_KRUM, 1),
        (AggregationRule.CENTERED_CLIP, 250_000),
    ],
)
def test_a_round_on_disk_is_the_round_in_memory(
    tmp_path: Path, workers: int, rule: AggregationRule, param: int
) -> None:
    numel = 9_000
    gen = torch.Generator().manual_seed(11)
    previous = TrainingState.from_model_state_dict({"p": torch.randn(numel, generator=gen)})
    subs: list[CommittedSubmission] = []
    qgs = [quantize(torch.randn(numel, generator=gen) * 0.02, 8) for _ in range(6)]
    for fragment, qg in enumerate(qgs):
        data = qg.to_safetensors_bytes()
        subs.append(CommittedSubmission(fragment, keccak(data), gradient_chunk_root(qg), data))
    good = subs[0].payload
    assert good is not None
    for offset, data in enumerate(_bad_payloads(numel, good, qgs[0]).values()):
        subs.append(CommittedSubmission(6 + offset, keccak(data), gradient_chunk_root(qgs[0]), data))
    subs.append(CommittedSubmission(11, keccak(good + b"!"), gradient_chunk_root(qgs[0]), good))  # hash mismatch
    subs.append(CommittedSubmission(12, keccak(good), b"\x01" * 32, good))  # chunk root mismatch
    subs.append(CommittedSubmission(13, b"\x02" * 32, b"\x03" * 32, None, "fetch timed out"))
    max_bytes = len(good) + 1_000
    kwargs = dict(
        rule=rule, rule_param=param, bits=8, lr_ppm=700_000, momentum_ppm=900_000, max_payload_bytes=max_bytes
    )
    expected = compute_round(previous, subs, workers=1, **kwargs)

    state = tmp_path / "state"
    state.write_bytes(previous.weights.numpy().tobytes() + previous.momentum.numpy().tobytes())
    files = []
    for sub in subs:
        path = None
        if sub.payload is not None:
            path = tmp_path / f"payload{sub.fragment}"
            path.write_bytes(sub.payload)
        files.append(
            PayloadFile(sub.fragment, sub.payload_hash, sub.chunk_root, str(path) if path else None, sub.fetch_error)
        )
    w = FileRegion(str(state), 0, numel, writable=True)
    m = FileRegion(str(state), 8 * numel, numel, writable=True)
    got = compute_round_on_disk(w, m, files, workers=workers, range_chunks=4, **kwargs)
    assert got.rejected == dict(expected.rejected)
    assert len([r for r in got.rejected.values() if not r.startswith("filtered")]) == 8
    assert (got.state_root, got.aggregate_root, got.accepted_mask, got.rule_used) == (
        expected.state_root,
        expected.aggregate_root,
        expected.accepted_mask,
        expected.rule_used,
    )
    raw = np.frombuffer(state.read_bytes(), dtype="<i8")
    assert np.array_equal(raw[:numel], expected.state.weights.numpy())
    assert np.array_equal(raw[numel:], expected.state.momentum.numpy())
    assert state_root_on_disk(w, m, 2) == expected.state_root


def test_a_payload_whose_digest_the_fetch_verified_is_not_hashed_again(tmp_path: Path) -> None:
    """``digest_verified`` (the blob store's fetch checked the keccak as the bytes arrived) skips
    only the second hash of the file: every other check still runs."""
    numel = 3_000
    previous = TrainingState.from_model_state_dict(
        {"p": torch.randn(numel, generator=torch.Generator().manual_seed(3))}
    )
    qg = quantize(torch.randn(numel, generator=torch.Generator().manual_seed(4)) * 0.02, 8)
    data = qg.to_safetensors_bytes()
    path = tmp_path / "payload"
    path.write_bytes(data)
    kwargs = dict(
        rule=AggregationRule.MEAN, rule_param=0, bits=8, lr_ppm=700_000, momentum_ppm=900_000, max_payload_bytes=1 << 20
    )

    def run(sub: PayloadFile) -> tuple[bytes, int, dict[int, str]]:
        state = tmp_path / "state"
        state.write_bytes(previous.weights.numpy().tobytes() + previous.momentum.numpy().tobytes())
        w = FileRegion(str(state), 0, numel, writable=True)
        m = FileRegion(str(state), 8 * numel, numel, writable=True)
        got = compute_round_on_disk(w, m, [sub], workers=1, **kwargs)
        return got.state_root, got.accepted_mask, got.rejected

    honest = run(PayloadFile(0, keccak(data), gradient_chunk_root(qg), str(path)))
    assert run(PayloadFile(0, keccak(data), gradient_chunk_root(qg), str(path), digest_verified=True)) == honest
    assert honest[1] == 1
    # The flag is the caller's word that the fetch checked the digest: the file is not read for it.
    unchecked = run(PayloadFile(0, b"\x07" * 32, gradient_chunk_root(qg), str(path), digest_verified=True))
    assert unchecked == honest
    assert run(PayloadFile(0, b"\x07" * 32, gradient_chunk_root(qg), str(path)))[2] == {0: HASH_MISMATCH}
    # The chunk root is still checked.
    assert run(PayloadFile(0, keccak(data), b"\x01" * 32, str(path), digest_verified=True))[2] == {
        0: CHUNK_ROOT_MISMATCH
    }
