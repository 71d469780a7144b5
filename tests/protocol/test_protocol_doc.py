"""``docs/protocol.md`` re-implemented from the page alone, checked against the reference code.

Every ``doc_*`` function below is written from the normative spec (``docs/protocol.md``) with
plain Python integers, ``fractions.Fraction``, ``struct`` and ``eth_utils.keccak``; none of them
calls Syncline's encoders. Each test draws small random inputs, computes the expected value with
the ``doc_*`` functions and compares it with what ``syncline.protocol`` (and friends) produce. The
worked examples of the page are checked too, so a wrong number in the doc fails here.
"""

from __future__ import annotations

import json
import math
import random
import struct
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from eth_utils import keccak, to_checksum_address

from syncline.blobstore.store import alias_message
from syncline.protocol import merkle
from syncline.protocol.aggregation import make_rule
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointManifest,
    InnerHyperparameters,
    checkpoint_root,
    manifest_alias,
    manifest_root_alias,
)
from syncline.protocol.chunking import gradient_chunk_root
from syncline.protocol.enums import AggregationRule
from syncline.protocol.outer_optimizer import nesterov_step
from syncline.protocol.quantization import QuantizedGradient, dequantize, quantize
from syncline.protocol.seeds import round_seed
from syncline.protocol.signed_messages import Commitment, Domain, Vote, digest
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.spot_checks import (
    deterrence_ppm,
    reward_per_submission,
    spot_check_draw,
    spot_check_threshold,
)
from syncline.protocol.state import TrainingState
from syncline.protocol.sync_round import CommittedSubmission, aggregate_root, compute_round
from syncline.run.gossip import commitment_alias, report_alias, vote_alias

# ---------------------------------------------------------------------- §1-§2 conventions, constants

CHUNK = 256
STATE_MAX = 2**46 - 1
QMAX = {8: 127, 16: 32767}
CAP = {8: 34, 16: 26}


def u256(x: int) -> bytes:
    return x.to_bytes(32, "big")


def i64be(values: list[int]) -> bytes:
    return b"".join(v.to_bytes(8, "big", signed=True) for v in values)


def chunk_ranges(numel: int) -> list[tuple[int, int]]:
    return [(s, min(s + CHUNK, numel)) for s in range(0, numel, CHUNK)]


def sat(x: int) -> int:
    return min(max(x, -STATE_MAX), STATE_MAX)


_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def doc_quote(s: str, *, ascii_only: bool) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif o < 0x20 or (ascii_only and o > 0x7E):
            if o > 0xFFFF:  # UTF-16 surrogate pair
                v = o - 0x10000
                out.append(f"\\u{0xD800 + (v >> 10):04x}\\u{0xDC00 + (v & 0x3FF):04x}")
            else:
                out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def doc_json(x: Any, *, ascii_only: bool = False) -> str:
    """Compact sorted JSON as §1 and §12.2 define it (numbers, strings, key order)."""
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        return repr(x)  # shortest round-trip, positional for 1e-4 <= |x| < 1e16
    if isinstance(x, str):
        return doc_quote(x, ascii_only=ascii_only)
    if isinstance(x, list | tuple):
        return "[" + ",".join(doc_json(v, ascii_only=ascii_only) for v in x) + "]"
    if isinstance(x, dict):
        items = sorted(x.items())  # code-point order
        return (
            "{"
            + ",".join(f"{doc_quote(k, ascii_only=ascii_only)}:{doc_json(v, ascii_only=ascii_only)}" for k, v in items)
            + "}"
        )
    raise TypeError(type(x))


def padded_ascii_json(obj: Any) -> bytes:
    text = doc_json(obj, ascii_only=True).encode("ascii")
    return text + b" " * (-len(text) % 8)


# ---------------------------------------------------------------------- §3 Merkle trees


def doc_leaf(i: int, h: bytes) -> bytes:
    return keccak(u256(i) + h)


def doc_root_of_level(level: list[bytes]) -> bytes:
    while len(level) > 1:
        nxt = [keccak(level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])  # carried up unchanged
        level = nxt
    return level[0]


def doc_merkle_root(content_hashes: list[bytes]) -> bytes:
    assert content_hashes
    return doc_root_of_level([doc_leaf(i, h) for i, h in enumerate(content_hashes)])


def doc_verify(root: bytes, i: int, h: bytes, path: list[bytes], n: int) -> bool:
    if i >= n:
        return False
    node, pos, width, used = doc_leaf(i, h), i, n, 0
    while width > 1:
        if (pos ^ 1) < width:
            if used == len(path):
                return False
            node = keccak(path[used] + node) if pos & 1 else keccak(node + path[used])
            used += 1
        pos >>= 1
        width = (width + 1) >> 1
    return used == len(path) and node == root


# ---------------------------------------------------------------------- §4-§6 layout, grid, state


def doc_layout_json(params: dict[str, tuple[list[int], str]]) -> bytes:
    entries = [{"name": n, "shape": shape, "dtype": dt} for n, (shape, dt) in sorted(params.items())]
    return doc_json({"version": 1, "params": entries}).encode("utf-8")


def doc_to_fixed(x: float) -> int:
    return round(x * 2**32)  # exact product; Python's round() on a float is half-to-even


def doc_q16(ppm: int) -> int:
    return ppm * 2**16 // 10**6


def doc_state_root(weights: list[int], momentum: list[int]) -> bytes:
    hashes = [keccak(i64be(weights[a:b]) + i64be(momentum[a:b])) for a, b in chunk_ranges(len(weights))]
    return doc_merkle_root(hashes)


def doc_safetensors(metadata: dict[str, str], tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    header: dict[str, Any] = {"__metadata__": metadata}
    data, offset = b"", 0
    for name in sorted(tensors):
        code, shape, raw = tensors[name]
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = padded_ascii_json(header)
    return struct.pack("<Q", len(text)) + text + data


def doc_state_bytes(layout_json: bytes, weights: list[int], momentum: list[int]) -> bytes:
    n = len(weights)
    return doc_safetensors(
        {"format": "syncline-state-v1", "layout": layout_json.decode("utf-8")},
        {
            "weights": ("I64", [n], struct.pack(f"<{n}q", *weights)),
            "momentum": ("I64", [n], struct.pack(f"<{n}q", *momentum)),
        },
    )


# ---------------------------------------------------------------------- §7 payloads


def doc_quantize(g: list[float], bits: int) -> tuple[list[int], list[int]]:
    """Per-chunk exponent and values, from the definition: k is the smallest integer with
    qmax * 2^k >= m (found by search on exact rationals, not with frexp)."""
    qmax, cap = QMAX[bits], CAP[bits]
    values, exps = [], []
    for a, b in chunk_ranges(len(g)):
        chunk = [Fraction(v) for v in g[a:b]]
        m = max(abs(v) for v in chunk)
        if m == 0:
            exps.append(0)
            values += [0] * (b - a)
            continue
        k = m.numerator.bit_length() - m.denominator.bit_length() - qmax.bit_length() - 2
        while qmax * Fraction(2) ** k < m:
            k += 1
        assert qmax * Fraction(2) ** (k - 1) < m
        e = min(max(k + 32, 0), cap)
        exps.append(e)
        values += [max(-qmax, min(qmax, round(v * Fraction(2) ** (32 - e)))) for v in chunk]
    return values, exps


def doc_gradient_chunks(bits: int, values: list[int], exps: list[int]) -> list[bytes]:
    width = bits // 8
    return [
        bytes([bits, exps[c]]) + b"".join(v.to_bytes(width, "big", signed=True) for v in values[a:b])
        for c, (a, b) in enumerate(chunk_ranges(len(values)))
    ]


def doc_chunk_root(bits: int, values: list[int], exps: list[int]) -> bytes:
    return doc_merkle_root([keccak(c) for c in doc_gradient_chunks(bits, values, exps)])


def doc_payload(bits: int, values: list[int], exps: list[int]) -> bytes:
    fmt = "b" if bits == 8 else "h"
    n = len(values)
    return doc_safetensors(
        {"bits": str(bits), "numel": str(n), "chunk_size": "256"},
        {
            "values": ("I8" if bits == 8 else "I16", [n], struct.pack(f"<{n}{fmt}", *values)),
            "exponents": ("U8", [len(exps)], bytes(exps)),
        },
    )


def doc_decode_payload(data: bytes, numel: int) -> tuple[int, list[int], list[int]] | None:
    """§10.2 rule 4 (the checks the doc lists), returning (bits, values, exponents) or None."""
    try:
        return _decode_payload(data, numel)
    except (ValueError, KeyError, TypeError, AttributeError, struct.error):
        return None


def _decode_payload(data: bytes, numel: int) -> tuple[int, list[int], list[int]] | None:
    if len(data) < 8:
        return None
    hl = struct.unpack("<Q", data[:8])[0]
    if hl > 2**20 or 8 + hl > len(data):
        return None
    header = json.loads(data[8 : 8 + hl].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    fields = {}
    for key in ("bits", "numel", "chunk_size"):
        text = meta.get(key)
        if not (isinstance(text, str) and 1 <= len(text) <= 12 and all(c in "0123456789" for c in text)):
            return None
        fields[key] = int(text)
    bits = fields["bits"]
    if fields["chunk_size"] != 256 or fields["numel"] != numel or numel < 1 or bits not in (8, 16):
        return None
    chunks = -(-numel // 256)
    expected = {
        "values": ("I8" if bits == 8 else "I16", [numel], numel * bits // 8),
        "exponents": ("U8", [chunks], chunks),
    }
    if set(header) != set(expected):
        return None
    spans = []
    for name, (code, shape, size) in expected.items():
        entry = header[name]
        b, e = entry["data_offsets"]
        if entry["dtype"] != code or entry["shape"] != shape or e - b != size:
            return None
        spans.append((b, e, name))
    cursor, raw = 0, {}
    for b, e, name in sorted(spans):
        if b != cursor:
            return None
        raw[name] = data[8 + hl + b : 8 + hl + e]
        cursor = e
    if 8 + hl + cursor != len(data):
        return None
    fmt = "b" if bits == 8 else "h"
    values = list(struct.unpack(f"<{numel}{fmt}", raw["values"]))
    exps = list(raw["exponents"])
    if max(exps) > CAP[bits] or -QMAX[bits] - 1 in values:
        return None
    return bits, values, exps


def doc_dequantize(values: list[int], exps: list[int]) -> list[int]:
    return [v << exps[j // CHUNK] for j, v in enumerate(values)]


# ---------------------------------------------------------------------- §8 aggregation


def floor_mean(rows: list[list[int]]) -> list[int]:
    return [sum(col) // len(rows) for col in zip(*rows, strict=True)]


def doc_median(rows: list[list[int]]) -> list[int]:
    n, out = len(rows), []
    for col in zip(*rows, strict=True):
        s = sorted(col)
        out.append(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) >> 1)
    return out


def doc_trimmed(rows: list[list[int]], beta_bps: int) -> list[int]:
    n = len(rows)
    t = beta_bps * n // 10000
    return [sum(sorted(col)[t : n - t]) // (n - 2 * t) for col in zip(*rows, strict=True)]


def doc_krum_scores(rows: list[list[int]], f: int) -> list[int]:
    n = len(rows)
    y = [[v >> 16 for v in r] for r in rows]
    dist = [[sum((a - b) ** 2 for a, b in zip(y[i], y[j], strict=True)) for j in range(n)] for i in range(n)]
    return [sum(sorted(dist[i][j] for j in range(n) if j != i)[: n - f - 2]) for i in range(n)]


def doc_krum(rows: list[list[int]], f: int) -> tuple[list[int], tuple[int, ...]]:
    scores = doc_krum_scores(rows, f)
    best = min(range(len(rows)), key=lambda i: (scores[i], i))
    return list(rows[best]), (best,)


def doc_multikrum(rows: list[list[int]], f: int) -> tuple[list[int], tuple[int, ...]]:
    scores = doc_krum_scores(rows, f)
    chosen = sorted(sorted(range(len(rows)), key=lambda i: (scores[i], i))[: len(rows) - f])
    return floor_mean([rows[i] for i in chosen]), tuple(chosen)


def doc_centered_clip(rows: list[list[int]], radius_ppm: int, iterations: int = 3) -> list[int]:
    tau = radius_ppm * 2**32 // 10**6
    v = doc_median(rows)
    for _ in range(iterations):
        clipped = []
        for r in rows:
            z = [a - b for a, b in zip(r, v, strict=True)]
            norm = math.isqrt(sum((zk >> 16) ** 2 for zk in z)) << 16
            factor = min(2**20, tau * 2**20 // max(norm, 1))
            clipped.append([(zk * factor) >> 20 for zk in z])
        v = [a + b for a, b in zip(v, floor_mean(clipped), strict=True)]
    return v


def doc_aggregate(rule: AggregationRule, param: int, rows: list[list[int]]) -> tuple[list[int], tuple[int, ...]]:
    everyone = tuple(range(len(rows)))
    if rule in (AggregationRule.KRUM, AggregationRule.MULTI_KRUM) and len(rows) < 2 * param + 3:
        return doc_median(rows), everyone  # the fallback of §8
    if rule == AggregationRule.MEAN:
        return floor_mean(rows), everyone
    if rule == AggregationRule.TRIMMED_MEAN:
        return doc_trimmed(rows, param), everyone
    if rule == AggregationRule.COORDINATE_MEDIAN:
        return doc_median(rows), everyone
    if rule == AggregationRule.KRUM:
        return doc_krum(rows, param)
    if rule == AggregationRule.MULTI_KRUM:
        return doc_multikrum(rows, param)
    return doc_centered_clip(rows, param), everyone


def doc_aggregate_root(a: list[int]) -> bytes:
    return doc_merkle_root([keccak(i64be(a[s:t])) for s, t in chunk_ranges(len(a))])


# ---------------------------------------------------------------------- §9 outer step


def doc_nesterov(theta: int, m: int, delta: int, lr_ppm: int, mom_ppm: int) -> tuple[int, int]:
    big_l, big_m = doc_q16(lr_ppm), doc_q16(mom_ppm)
    m_new = sat(((big_m * m) >> 16) + delta)
    v = delta + ((big_m * m_new) >> 16)
    step = (big_l * v) // 2**16
    return sat(theta - step), m_new


# ---------------------------------------------------------------------- §11 EIP-712

DOMAIN_TYPE = "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
COMMITMENT_TYPE = (
    "Commitment(uint256 taskId,uint32 round,uint16 fragment,bytes32 payloadHash,bytes32 chunkRoot,"
    "bytes32 checkpointRoot,string uri)"
)
VOTE_TYPE = (
    "Vote(uint256 taskId,uint32 round,bytes32 prevStateRoot,bytes32 stateRoot,bytes32 aggregateRoot,"
    "uint256 acceptedMask,uint256 metric)"
)


def doc_eip712(chain_id: int, contract: str, type_string: str, words: list[bytes]) -> bytes:
    separator = keccak(
        keccak(text=DOMAIN_TYPE) + keccak(b"Syncline") + keccak(b"1") + u256(chain_id) + u256(int(contract, 16))
    )
    struct_hash = keccak(keccak(text=type_string) + b"".join(words))
    return keccak(b"\x19\x01" + separator + struct_hash)


# ---------------------------------------------------------------------- §14 randomness


def doc_round_seed(task: int, round_: int, fragment: int) -> int:
    return int.from_bytes(keccak(u256(task) + u256(round_) + u256(fragment))[:8], "big") % 2**63


def doc_reward_per_submission(pool: int, rounds: int, min_trainers: int) -> int:
    return -(-pool // (rounds * min_trainers))


def doc_deters(stake: int, ppm: int, pool: int, rounds: int, min_trainers: int) -> bool:
    return 1 <= ppm <= 10**6 and stake * ppm >= 2 * doc_reward_per_submission(pool, rounds, min_trainers) * 10**6


def doc_default_ppm(stake: int, pool: int, rounds: int, min_trainers: int) -> int:
    return min(10**6, -(-2 * doc_reward_per_submission(pool, rounds, min_trainers) * 10**6 // stake))


def doc_spot_check(task: int, round_: int, fragment: int, root: bytes, block: bytes, ppm: int, s: int) -> int | None:
    h = keccak(b"syncline-spot-check-v1" + u256(task) + u256(round_) + u256(fragment) + root + block)
    threshold = ppm * 2**64 // 10**6
    if int.from_bytes(h[:8], "big") >= threshold:
        return None
    return int.from_bytes(h[8:16], "big") % (s + 1)


# ---------------------------------------------------------------------- tests


def rand_hash(rng: random.Random) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(32))


def test_merkle_root_proofs_and_example() -> None:
    rng = random.Random(1)
    for n in range(1, 14):
        hashes = [rand_hash(rng) for _ in range(n)]
        root = doc_merkle_root(hashes)
        assert merkle.root(hashes) == root
        for i in range(n):
            assert doc_verify(root, i, hashes[i], merkle.proof(hashes, i), n)
            assert not doc_verify(root, i, rand_hash(rng), merkle.proof(hashes, i), n)
    abc = [keccak(b"a"), keccak(b"b"), keccak(b"c")]
    assert doc_leaf(0, abc[0]).hex() == "83853f8c4ca91ae85231d68dec421e7d9210f65860b863a574dfc0dc0c7e815e"
    assert doc_merkle_root(abc).hex() == "a219b0d5bb48b0fa07a24c8fc28d8d82de125301884db618781fa5e37149f69a"


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("numel", [1, 3, 256, 257, 700])
def test_gradient_chunk_root_and_payload_bytes(bits: int, numel: int) -> None:
    rng = random.Random(bits * 1000 + numel)
    qmax = QMAX[bits]
    values = [rng.randint(-qmax, qmax) for _ in range(numel)]
    exps = [rng.randint(0, CAP[bits]) for _ in range(-(-numel // CHUNK))]
    dtype = torch.int8 if bits == 8 else torch.int16
    qg = QuantizedGradient(
        bits=bits, values=torch.tensor(values, dtype=dtype), exponents=torch.tensor(exps, dtype=torch.uint8)
    )
    assert gradient_chunk_root(qg) == doc_chunk_root(bits, values, exps)
    assert qg.to_safetensors_bytes() == doc_payload(bits, values, exps)
    assert dequantize(qg).tolist() == doc_dequantize(values, exps)
    assert doc_decode_payload(doc_payload(bits, values, exps), numel) == (bits, values, exps)


@pytest.mark.parametrize("bits", [8, 16])
def test_quantization(bits: int) -> None:
    gen = torch.Generator().manual_seed(bits)
    scales = torch.tensor([1e-3, 0.0, 1e-12, 3.0, 5e3, 1.0])  # incl. all-zero, tiny (e = 0) and saturating chunks
    g = (torch.randn(6 * CHUNK - 17, generator=gen) * scales.repeat_interleave(CHUNK)[: 6 * CHUNK - 17]).float()
    g[5] = 0.5  # exact powers of two hit the boundary of k
    g[6:10] = torch.tensor([5 / 256, -5 / 256, 5 / 2**16, -7 / 2**16])  # exact ties at 8 and 16 bits
    qg = quantize(g, bits)
    values, exps = doc_quantize(g.tolist(), bits)
    assert qg.exponents.tolist() == exps
    assert qg.values.tolist() == values


def test_quantization_example() -> None:
    g = torch.tensor([0.5, -0.25, 1e-3])
    values, exps = doc_quantize(g.tolist(), 8)
    assert (values, exps) == ([64, -32, 0], [25])
    chunk = doc_gradient_chunks(8, values, exps)[0]
    assert chunk.hex() == "081940e000"
    assert keccak(chunk).hex() == "f1f4ee6ec0240b58b6f3b5ab3a02eeb3781f0235e40bad2107963747b3b6aedc"
    assert doc_chunk_root(8, values, exps).hex() == "9b5665891ac933ba0fd74889daa77d700cbbde812ef53cb3f22388d8d41169e1"
    assert gradient_chunk_root(quantize(g, 8)).hex() == doc_chunk_root(8, values, exps).hex()


def float32(x: float) -> float:
    return float(np.float32(x))


def test_state_root_and_bytes() -> None:
    gen = torch.Generator().manual_seed(3)
    sd = {
        "z.weight": torch.randn(3, 100, generator=gen),
        "a.bias": torch.randn(7, generator=gen).double(),  # float64: rounded to float32 by the layout
        "m": (torch.randn(2, 2, 2, generator=gen) * 1e-4).to(torch.bfloat16),
        "scalar": torch.tensor(0.3),
        "tiny": torch.tensor([2**-33, 3 * 2**-33, -5 * 2**-33, 1e-10, -3e-10]),  # grid ties and fractions
        "Émbed": torch.randn(150, generator=gen) * 100,
    }
    state = TrainingState.from_model_state_dict(sd)
    params = {k: ([int(s) for s in v.shape], str(v.dtype).removeprefix("torch.")) for k, v in sd.items()}
    layout_json = doc_layout_json(params)
    assert state.layout.canonical_json() == layout_json
    assert state.layout.digest() == keccak(layout_json)
    flat = [float32(x) for name in sorted(sd) for x in sd[name].double().reshape(-1).tolist()]
    weights = [doc_to_fixed(x) for x in flat]
    momentum = [0] * len(weights)
    assert state.weights.tolist() == weights
    assert state.state_root() == doc_state_root(weights, momentum)
    assert state.to_bytes() == doc_state_bytes(layout_json, weights, momentum)
    rng = random.Random(4)  # a state with momentum, via an outer step
    delta = [rng.randint(-(2**40), 2**40) for _ in weights]
    moved = state.apply_round(torch.tensor(delta), 700_000, 900_000)
    expected = [doc_nesterov(t, 0, d, 700_000, 900_000) for t, d in zip(weights, delta, strict=True)]
    new_w, new_m = [e[0] for e in expected], [e[1] for e in expected]
    assert moved.state_root() == doc_state_root(new_w, new_m)
    assert moved.to_bytes() == doc_state_bytes(layout_json, new_w, new_m)


def test_state_example() -> None:
    sd = {"w": torch.tensor([1.0, -0.5]), "b": torch.tensor([0.25])}
    weights = [doc_to_fixed(x) for x in (0.25, 1.0, -0.5)]
    assert weights == [2**30, 2**32, -(2**31)]
    root = doc_state_root(weights, [0, 0, 0])
    assert "0x" + root.hex() == "0x1d90f22aee3a7ed728be2c8a98708cc31ae6b21b2d0c2aaf181f39baace32c84"
    layout_json = doc_layout_json({"w": ([2], "float32"), "b": ([1], "float32")})
    assert keccak(layout_json).hex() == "c5d46b8745ff75a398205cfe781d6b19f6eda90bb8b009249abd5f45d9480b15"
    state = TrainingState.from_model_state_dict(sd)
    assert state.state_root() == root
    assert struct.unpack("<Q", state.to_bytes()[:8])[0] == 320


RULES = [
    (AggregationRule.MEAN, 0),
    (AggregationRule.TRIMMED_MEAN, 3400),
    (AggregationRule.COORDINATE_MEDIAN, 0),
    (AggregationRule.KRUM, 0),
    (AggregationRule.MULTI_KRUM, 0),
    (AggregationRule.CENTERED_CLIP, 250_000),
]


@pytest.mark.parametrize(("rule", "param"), RULES)
@pytest.mark.parametrize("n", [3, 6])
def test_aggregation_rules_and_aggregate_root(rule: AggregationRule, param: int, n: int) -> None:
    rng = random.Random(int(rule) * 10 + n)
    d = 300  # two chunks, the last one short
    center = [rng.randint(-(2**36), 2**36) for _ in range(d)]
    rows = [[c + rng.randint(-(2**33), 2**33) for c in center] for _ in range(n - 1)]
    rows.append([rng.choice([-1, 1]) * (2**41 - 1 - rng.randint(0, 2**20)) for _ in range(d)])  # an outlier
    param = 1 if rule in (AggregationRule.KRUM, AggregationRule.MULTI_KRUM) and n == 6 else param
    result = make_rule(rule, param).aggregate_with_info(torch.tensor(rows, dtype=torch.int64))
    expected, selected = doc_aggregate(rule, param, rows)
    assert result.aggregate.tolist() == expected
    assert result.selected == selected
    assert aggregate_root(result.aggregate) == doc_aggregate_root(expected)


def test_aggregation_examples() -> None:
    rows = [[3, -4], [4, 10], [-8, 1]]
    assert floor_mean(rows) == [-1, 2]
    assert doc_median(rows) == [3, 1]
    assert doc_trimmed(rows, 3400) == [3, 1]
    assert doc_median([[-3], [-4]]) == [-4]
    assert doc_aggregate_root([-1, 2]).hex() == "1e4a1dab0918833223888d10b7e41770c14840443028308044725a20487bd5bf"
    krum_rows = [[7, 0], [65536, 65535], [327683, 327681]]
    assert doc_krum_scores(krum_rows, 0) == [1, 1, 41]
    assert doc_krum(krum_rows, 0) == ([7, 0], (0,))
    clip_rows = [[0], [2**32], [10 * 2**32]]
    assert doc_centered_clip(clip_rows, 500_000, iterations=1) == [4294964565]
    assert doc_centered_clip(clip_rows, 500_000) == [4294962617]
    for rule, param, x in [(AggregationRule.KRUM, 0, krum_rows), (AggregationRule.CENTERED_CLIP, 500_000, clip_rows)]:
        got = make_rule(rule, param).aggregate(torch.tensor(x))
        assert got.tolist() == doc_aggregate(rule, param, x)[0]


def test_outer_step() -> None:
    rng = random.Random(5)
    n = 400
    for lr_ppm, mom_ppm in [(700_000, 900_000), (1, 0), (2**32 - 1, 999_999), (rng.randint(1, 2**32 - 1), 123_457)]:
        theta = [rng.randint(-STATE_MAX, STATE_MAX) >> rng.randint(0, 40) for _ in range(n)]
        mom = [rng.randint(-STATE_MAX, STATE_MAX) >> rng.randint(0, 40) for _ in range(n)]
        delta = [rng.randint(-(2**41) + 1, 2**41 - 1) >> rng.randint(0, 20) for _ in range(n)]
        th, mo = nesterov_step(torch.tensor(theta), torch.tensor(mom), torch.tensor(delta), lr_ppm, mom_ppm)
        expected = [doc_nesterov(*a, lr_ppm, mom_ppm) for a in zip(theta, mom, delta, strict=True)]
        assert th.tolist() == [e[0] for e in expected]
        assert mo.tolist() == [e[1] for e in expected]
    assert (doc_q16(700_000), doc_q16(900_000), doc_q16(1_000_000)) == (45875, 58982, 65536)
    assert doc_nesterov(2**32, 0, 2**28, 700_000, 900_000) == (3937950843, 268435456)
    assert doc_nesterov(-5, -7, -3, 700_000, 900_000) == (4, -10)


@pytest.mark.parametrize(("rule", "param"), [(AggregationRule.MEAN, 0), (AggregationRule.KRUM, 1)])
def test_compute_round_rejections_and_mask(rule: AggregationRule, param: int) -> None:
    numel, bits, rng = 300, 8, random.Random(6)
    gen = torch.Generator().manual_seed(6)
    previous = TrainingState.from_model_state_dict({"p": torch.randn(numel, generator=gen)})
    payloads = [quantize(torch.randn(numel, generator=gen) * 1e-2, b).to_safetensors_bytes() for b in (8, 8, 8, 16, 8)]
    subs = []
    for fragment, data in enumerate(payloads):
        decoded = doc_decode_payload(data, numel)
        assert decoded is not None
        root = doc_chunk_root(*decoded)
        payload_hash = keccak(data)
        if fragment == 1:
            payload_hash = rand_hash(rng)  # rule 3: hash mismatch
        if fragment == 4:
            root = rand_hash(rng)  # rule 6: chunk root mismatch
        subs.append(CommittedSubmission(fragment, payload_hash, root, data))
    subs.append(CommittedSubmission(5, rand_hash(rng), rand_hash(rng), None, "fetch failed: gone"))  # rule 1
    subs.append(CommittedSubmission(6, keccak(b"junk"), rand_hash(rng), b"junk"))  # rule 4
    max_bytes = numel * bits // 8 + numel // 128 + 2**20
    big = bytes(max_bytes + 1)
    subs.append(CommittedSubmission(7, keccak(big), rand_hash(rng), big))  # rule 2
    result = compute_round(
        previous,
        subs,
        rule=rule,
        rule_param=param,
        bits=bits,
        lr_ppm=700_000,
        momentum_ppm=900_000,
        max_payload_bytes=max_bytes,
    )
    valid = []  # the doc's predicate: size, hash, decode, bits, chunk root
    for s in sorted(subs, key=lambda s: s.fragment):
        if s.payload is None or len(s.payload) > max_bytes or keccak(s.payload) != s.payload_hash:
            continue
        decoded = doc_decode_payload(s.payload, numel)
        if decoded is None or decoded[0] != bits or doc_chunk_root(*decoded) != s.chunk_root:
            continue
        valid.append((s.fragment, doc_dequantize(decoded[1], decoded[2])))
    assert [f for f, _ in valid] == [0, 2]
    aggregate, selected = doc_aggregate(rule, param, [row for _, row in valid])
    mask = sum(1 << valid[i][0] for i in selected)
    assert result.accepted_mask == mask == 0b101
    reasons = {
        1: "hash mismatch: payload keccak differs from the committed payloadHash",
        3: "wrong quantization: 16 bits, the task uses 8",
        4: "chunk root mismatch: payload chunks differ from the committed chunkRoot",
        5: "fetch failed: gone",
        6: "malformed payload: ",
        7: f"oversized payload ({max_bytes + 1} > {max_bytes} bytes)",
    }
    assert sorted(result.rejected) == sorted(reasons)
    assert all(result.rejected[f].startswith(text) for f, text in reasons.items())
    assert result.aggregate_root == doc_aggregate_root(aggregate)
    stepped = [
        doc_nesterov(t, m, a, 700_000, 900_000)
        for t, m, a in zip(previous.weights.tolist(), previous.momentum.tolist(), aggregate, strict=True)
    ]
    assert result.state_root == doc_state_root([s[0] for s in stepped], [s[1] for s in stepped])
    empty = compute_round(
        previous,
        subs[3:],
        rule=rule,
        rule_param=param,
        bits=bits,
        lr_ppm=700_000,
        momentum_ppm=900_000,
        max_payload_bytes=2**21,
    )
    assert (empty.accepted_mask, empty.aggregate_root, empty.state_root) == (0, b"\x00" * 32, previous.state_root())


# ---------------------------------------------------------------------- §12 spec


RULE_NAMES = {0: "mean", 1: "trimmed_mean", 2: "coordinate_median", 3: "krum", 4: "multi_krum", 5: "centered_clip"}
TIERS = ("open", "verified", "confidential")
MODALITIES = ("language", "time_series", "vision")
TOLERANCE = {
    "weight_base": 0.05,
    "weight_per_step": 0.001,
    "tensor_factor": 3.0,
    "moment_base": 0.06,
    "moment_per_step": 0.0005,
    "max_abs_lr": 4.0,
}
DEVICE_CLASSES = ["cpu-fp32", "cpu-bf16", "cuda-fp32", "cuda-bf16"]


def enum_name(value: Any, names: tuple[str, ...]) -> str:
    if isinstance(value, int):
        return names[value]
    key = value.strip().upper().replace("-", "_").replace(" ", "_")
    for name in names:
        if key in (name.upper(), name.upper().replace("_", "")) or key.replace("_", "") == name.upper().replace(
            "_", ""
        ):
            return name
    raise ValueError(value)


def doc_spec_mapping(raw: dict[str, Any]) -> dict[str, Any]:
    """The canonical mapping of §12.1 built from an input mapping."""
    agg = raw.get("aggregation", {})
    outer = raw.get("outer_optimizer", {})
    ds = raw["dataset"]
    ints = {
        "challenge_bond_wei": 0,
        "challenge_window_s": 0,
        "checkpoint_interval": 0,
        "eviction_slash_bps": 1000,
        "grace_window_s": 0,
        "gradient_bits": 8,
        "max_missed_rounds": 2,
        "param_count": 0,
        "witness_bond_wei": 0,
        "witness_fee_wei": 0,
        "enrollment_deadline": None,
        "inner_steps": None,
        "max_trainers": None,
        "min_trainers": None,
        "reward_pool_wei": None,
        "round_duration_s": None,
        "rounds": None,
        "threshold": None,
        "trainer_stake_wei": None,
    }
    out: dict[str, Any] = {k: int(raw[k]) if k in raw else default for k, default in ints.items()}
    out |= {
        "aggregation": {
            "rule": enum_name(agg.get("rule", "mean"), tuple(RULE_NAMES.values())),
            "trim_fraction": float(agg.get("trim_fraction", 0.0)),
            "krum_f": int(agg.get("krum_f", 0)),
            "clip_radius": float(agg.get("clip_radius", 0.0)),
        },
        "dataset": {
            "shard_hashes": [h.lower() for h in ds["shard_hashes"]],
            "shard_uris": [str(u) for u in ds.get("shard_uris", [])],
            "validation_hash": ds["validation_hash"].lower() if ds.get("validation_hash") else None,
            "validation_uri": ds.get("validation_uri"),
        },
        "initial_state_root": raw["initial_state_root"].lower(),
        "metadata": raw.get("metadata", {}),
        "modality": enum_name(raw.get("modality", "language"), MODALITIES),
        "model": {"family": str(raw["model"]["family"]), "config": raw["model"].get("config", {})},
        "name": str(raw["name"]),
        "outer_optimizer": {"lr": float(outer.get("lr", 0.7)), "momentum": float(outer.get("momentum", 0.9))},
        "tier": enum_name(raw.get("tier", "open"), TIERS),
        "witnesses": [to_checksum_address(w) for w in raw["witnesses"]],
    }
    if raw.get("verification") is not None:
        v = raw["verification"]
        ver: dict[str, Any] = {
            "device_classes": list(v.get("device_classes", DEVICE_CLASSES)),
            "tolerance": {k: float(v.get("tolerance", {}).get(k, d)) for k, d in TOLERANCE.items()},
        }
        if v.get("checkpoints", "eager") == "on-demand":
            ver["checkpoints"] = "on-demand"
        if v.get("spot_check_rate") is not None:
            ver["spot_check_rate"] = float(v["spot_check_rate"])
        out["verification"] = ver
    return out


def doc_rule_param(m: dict[str, Any]) -> int:
    agg = m["aggregation"]
    rule = agg["rule"]
    if rule == "trimmed_mean":
        return round(agg["trim_fraction"] * 1e4)
    if rule in ("krum", "multi_krum"):
        return agg["krum_f"]
    if rule == "centered_clip":
        return round(agg["clip_radius"] * 1e6)
    return 0


def random_text(rng: random.Random) -> str:
    alphabet = ['"', "\\", "\n", "\t", "\x01", "\x1f", "\x7f", "/", "é", "\u2028", "\U0001f600", "a", "Z", " "]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 7 if depth < 2 else 5)
    if kind == 0:
        return rng.randint(-(10**20), 10**20)
    if kind == 1:
        return rng.choice([0.7, 1.0, 1e-05, 1e16, 1234567890123456.0, -0.0, 2.5e-06, rng.uniform(-1e6, 1e6)])
    if kind == 2:
        return random_text(rng)
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        return rng.random()
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {random_text(rng) + str(i): random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def random_dict(rng: random.Random) -> dict[str, Any]:
    return {random_text(rng) + str(i): random_value(rng, 1) for i in range(rng.randint(0, 4))}


def random_spec(rng: random.Random) -> dict[str, Any]:
    rule = rng.randint(0, 5)
    raw: dict[str, Any] = {
        "name": random_text(rng),
        "model": {"family": rng.choice(["llama", "gpt2"]), "config": random_dict(rng)}
        if rng.random() < 0.5
        else {"family": "llama"},
        "dataset": {"shard_hashes": ["0x" + rand_hash(rng).hex().upper() for _ in range(rng.randint(1, 4))]},
        "inner_steps": rng.choice([4, "12"]),
        "rounds": 3,
        "round_duration_s": 60,
        "trainer_stake_wei": rng.randint(1, 10**20),
        "min_trainers": 1,
        "max_trainers": 1,
        "enrollment_deadline": 1_700_000_000,
        "witnesses": ["0x" + rand_hash(rng)[:20].hex() for _ in range(rng.randint(1, 3))],
        "threshold": 1,
        "reward_pool_wei": "5000",
        "initial_state_root": "0x" + rand_hash(rng).hex(),
        "aggregation": {
            "rule": rng.choice([RULE_NAMES[rule], RULE_NAMES[rule].upper().replace("_", "-"), rule]),
            "trim_fraction": rng.choice([0.1, 0.00015, 0.00005, 1]),
            "krum_f": rng.randint(0, 3),
            "clip_radius": rng.choice([0.25, 2.5e-6, 3]),
        },
        "outer_optimizer": {"lr": rng.choice([0.7, 1, "0.5", rng.random()]), "momentum": rng.random()},
        "tier": rng.choice(["open", "Verified", 2]),
        "modality": rng.choice(["language", "time-series", 2]),
        "metadata": {"note": random_text(rng), "nan": math.nan} if rng.random() < 0.3 else random_dict(rng),
    }
    for key in ("param_count", "checkpoint_interval", "witness_bond_wei", "gradient_bits"):
        if rng.random() < 0.5:
            raw[key] = rng.choice([16, 8, "2"])
    if rng.random() < 0.5:
        raw["dataset"]["validation_hash"] = "0x" + rand_hash(rng).hex().upper()
        raw["dataset"]["validation_uri"] = rng.choice(["http://v", 7])
    choice = rng.randint(0, 3)
    if choice == 1:
        raw["verification"] = {}
    elif choice == 2:
        raw["verification"] = {"checkpoints": "on-demand", "spot_check_rate": rng.choice([1, 0.25, "0.5"])}
    elif choice == 3:
        raw["verification"] = {"device_classes": ["cuda-bf16"], "tolerance": {"weight_base": 1}}
    return raw


def test_spec_hash_and_derived_values() -> None:
    rng = random.Random(7)
    for _ in range(40):
        raw = random_spec(rng)
        spec = TrainingTaskSpec.from_mapping(raw)
        mapping = doc_spec_mapping(raw)
        canonical = doc_json(mapping).encode("utf-8")
        assert spec.canonical_bytes() == canonical
        assert spec.spec_hash == "0x" + keccak(canonical).hex()
        model = {"family": mapping["model"]["family"], "config": mapping["model"]["config"]}
        assert spec.model.config_hash == "0x" + keccak(doc_json(model).encode("utf-8")).hex()
        shards = [bytes.fromhex(h[2:]) for h in mapping["dataset"]["shard_hashes"]]
        assert spec.dataset.root == "0x" + doc_merkle_root(shards).hex()
        assert spec.outer_lr_ppm == round(mapping["outer_optimizer"]["lr"] * 1e6)
        assert spec.outer_momentum_ppm == round(mapping["outer_optimizer"]["momentum"] * 1e6)
        assert spec.aggregation.rule_param == doc_rule_param(mapping)


def test_spec_example() -> None:
    raw = {
        "name": "demo",
        "model": {"family": "llama", "config": {"hidden_size": 8}},
        "dataset": {"shard_hashes": ["0x" + "11" * 32]},
        "inner_steps": 4,
        "rounds": 2,
        "round_duration_s": 60,
        "trainer_stake_wei": 1000,
        "min_trainers": 1,
        "max_trainers": 1,
        "enrollment_deadline": 1700000000,
        "witnesses": ["0x" + "22" * 20],
        "threshold": 1,
        "reward_pool_wei": 5000,
        "initial_state_root": "0x" + "33" * 32,
        "param_count": 512,
        "witness_bond_wei": 10,
    }
    mapping = doc_spec_mapping(raw)
    assert (
        keccak(doc_json(mapping).encode()).hex() == "fa5567c60a2262eda76e3c6b9c40c19ecdfeddee60ce18a16fde8fcfbb65018c"
    )
    model = doc_json({"family": "llama", "config": {"hidden_size": 8}}).encode()
    assert keccak(model).hex() == "f5ec6109b8cc44887508d3b60d4c3ea5d68ac1291056ad0f5321485f122f999c"
    root = doc_merkle_root([bytes.fromhex("11" * 32)])
    assert root.hex() == "8e4b8e18156a1c7271055ce5b7ef53bb370294ebd631a3b95418a92da46e681f"
    assert TrainingTaskSpec.from_mapping(raw).spec_hash == "0x" + keccak(doc_json(mapping).encode()).hex()
    assert [round(x) for x in (0.00015 * 1e4, 0.00005 * 1e4, 2.5e-6 * 1e6)] == [1, 0, 2]


# ---------------------------------------------------------------------- §11, §13-§15


def test_eip712_digests() -> None:
    rng = random.Random(8)
    for _ in range(10):
        chain_id, contract = rng.randint(1, 2**40), to_checksum_address(rand_hash(rng)[:20])
        domain = Domain(chain_id, contract)
        c = Commitment(
            rng.getrandbits(64),
            rng.getrandbits(32),
            rng.getrandbits(16),
            rand_hash(rng),
            rand_hash(rng),
            rand_hash(rng),
            random_text(rng),
        )
        words = [u256(c.task_id), u256(c.round), u256(c.fragment), c.payload_hash, c.chunk_root, c.checkpoint_root]
        assert digest(domain, c) == doc_eip712(chain_id, contract, COMMITMENT_TYPE, [*words, keccak(c.uri.encode())])
        v = Vote(
            rng.getrandbits(64),
            rng.getrandbits(32),
            rand_hash(rng),
            rand_hash(rng),
            rand_hash(rng),
            rng.getrandbits(256),
            rng.getrandbits(40),
        )
        words = [u256(v.task_id), u256(v.round), v.prev_state_root, v.state_root, v.aggregate_root]
        assert digest(domain, v) == doc_eip712(
            chain_id, contract, VOTE_TYPE, [*words, u256(v.accepted_mask), u256(v.metric)]
        )
    example = Domain(31337, "0x" + "ab" * 20)
    vote = Vote(1, 0, b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, 5, 2500000)
    vote_words = [u256(1), u256(0), b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, u256(5), u256(2500000)]
    expected = doc_eip712(31337, "0x" + "ab" * 20, VOTE_TYPE, vote_words)
    assert (
        expected.hex()
        == "9cc99d4b8fffd5b0d74189572fbdd8134bf4637038d4722435a75c2b825a2d11"
        == digest(example, vote).hex()
    )
    assert keccak(text=COMMITMENT_TYPE).hex() == "ebbe5708606a47b2a0c47d5f8c2f8a80e0a17dcdf26babb2bdda6253a7ce17b5"
    assert keccak(text=VOTE_TYPE).hex() == "5871380e5a6c78fed9b74481ff92986483e6c234ca33bbecda081753957e3060"


def test_round_seed() -> None:
    rng = random.Random(9)
    for _ in range(50):
        args = (rng.getrandbits(rng.choice([8, 64, 255])), rng.getrandbits(32), rng.getrandbits(16))
        assert round_seed(*args) == doc_round_seed(*args)
    assert doc_round_seed(1, 0, 0) == 2691690250641002501
    assert doc_round_seed(7, 3, 2) == 2213732504404311813


def test_spot_check_draw() -> None:
    rng = random.Random(10)
    for _ in range(300):
        ppm = rng.choice([1_000_000, 500_000, 250_000, 3810, 1, rng.randint(1, 1_000_000)])
        s = rng.randint(1, 9)
        args = (rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(16), rand_hash(rng), rand_hash(rng))
        assert spot_check_draw(*args, ppm=ppm, segments=s) == doc_spot_check(*args, ppm, s)
    root, block = keccak(b"state"), keccak(b"block")
    assert [doc_spot_check(1, 2, f, root, block, 500_000, 3) for f in range(6)] == [0, None, None, None, 3, 0]
    assert spot_check_threshold(500_000) == 2**63 and spot_check_threshold(1_000_000) == 2**64


def test_deterrence_rule() -> None:
    """§14's deterrence rule and default rate, against the library (and the sponsor defaults' example)."""
    rng = random.Random(12)
    eth = 10**18
    for _ in range(500):
        stake, pool = rng.randint(1, 10 * eth), rng.randint(1, 100 * eth)
        rounds, min_t = rng.randint(1, 50), rng.randint(1, 64)
        assert reward_per_submission(pool, rounds, min_t) == doc_reward_per_submission(pool, rounds, min_t)
        least = deterrence_ppm(stake, pool, rounds, min_t)
        assert min(least, 10**6) == doc_default_ppm(stake, pool, rounds, min_t)
        assert doc_deters(stake, least, pool, rounds, min_t) == (least <= 10**6)
        if 1 < least <= 10**6:
            assert not doc_deters(stake, least - 1, pool, rounds, min_t)
    # the sponsor defaults: 3 ETH over 8 rounds x 3 trainers, stake 1 ETH
    assert doc_reward_per_submission(3 * eth, 8, 3) == eth // 8
    assert doc_default_ppm(eth, 3 * eth, 8, 3) == 250_000
    assert not doc_deters(eth, 3810, 3 * eth, 8, 3) and not doc_deters(1, 10**6, 3 * eth, 8, 3)


def test_alias_names_and_alias_message() -> None:
    rng = random.Random(11)
    root = rand_hash(rng)
    witness = to_checksum_address(rand_hash(rng)[:20])
    assert manifest_alias(4, 5, 6) == "checkpoints:4:5:6"
    assert manifest_root_alias(root) == "checkpoints:0x" + root.hex()
    assert commitment_alias(4, 5, 6) == "gossip:commitment:4:5:6"
    assert vote_alias(4, 5, witness) == "gossip:vote:4:5:" + witness.lower()
    assert report_alias(4, 5, 6) == "gossip:report:4:5:6"
    digest_hex = "0x" + root.hex().upper()
    message = b"syncline-alias\n" + b"checkpoints:1:2:3" + b"\n" + digest_hex.lower().encode()
    assert alias_message("checkpoints:1:2:3", digest_hex) == message
    assert len(alias_message("checkpoints:1:2:3", "0x" + "AB" * 32)) == 99


def test_checkpoint_bytes_root_and_manifest() -> None:
    rng = random.Random(12)
    gen = torch.Generator().manual_seed(12)
    numel, hashes = 5, []
    for step, device in ((0, "cpu"), (3, "cuda"), (6, "cpu")):
        params, m1, m2 = (torch.randn(numel, generator=gen) for _ in range(3))
        m2 = m2.abs()
        opt = InnerHyperparameters(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, batch_size=4)
        rng_state = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 20)))
        layout_digest = rand_hash(rng)
        ckpt = Checkpoint(
            step=step,
            layout_digest=layout_digest,
            params=params,
            exp_avg=m1,
            exp_avg_sq=m2,
            adam_steps=(step, 0),
            optimizer=opt,
            dtype=rng.choice(["fp32", "bf16"]),
            threads=rng.randint(1, 8),
            rng_state=rng_state,
            device=device,
            deterministic=device == "cpu" or rng.random() < 0.5,
        )
        header: dict[str, Any] = {
            "adam_steps": [step, 0],
            "dtype": ckpt.dtype,
            "format": "syncline-checkpoint-v1" if device == "cpu" else "syncline-checkpoint-v2",
            "layout": "0x" + layout_digest.hex(),
            "numel": numel,
            "optimizer": {"batch_size": 4, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "lr": 1e-3, "weight_decay": 0.1},
            "rng_bytes": len(rng_state),
            "step": step,
            "threads": ckpt.threads,
        }
        if device != "cpu":
            header |= {"device": device, "deterministic": ckpt.deterministic}
        text = padded_ascii_json(header)
        body = b"".join(struct.pack(f"<{numel}f", *t.tolist()) for t in (params, m1, m2))
        data = b"SYNCKPT1" + struct.pack("<Q", len(text)) + text + body + rng_state
        assert ckpt.to_bytes() == data
        hashes.append(keccak(data))
    assert checkpoint_root(hashes) == doc_merkle_root(hashes)
    manifest = CheckpointManifest(interval=3, inner_steps=6, hashes=tuple(hashes), uris=("", "u", "é"))
    expected = {"format": "syncline-checkpoint-manifest-v1", "hashes": ["0x" + h.hex() for h in hashes]}
    expected |= {"inner_steps": 6, "interval": 3, "uris": ["", "u", "é"]}
    assert manifest.to_json() == doc_json(expected, ascii_only=True).encode("ascii")
