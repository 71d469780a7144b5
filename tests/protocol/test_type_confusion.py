"""Type confusion in every parser of untrusted bytes (issue 26, "Depth, not patches").

Items 2, 3 and 7 were one class: a parser of network or chain bytes raised something other than
its module's own error (``TypeError`` from ``"data_offsets": null``, ``OverflowError`` from a
400-digit number), and the caller, which caught only the declared error, failed its step. Here
every parser gets valid bytes with each value, at every position of the document, replaced by a
type-confused substitute (null, numbers, strings, lists, objects, nested ones), and with each key
dropped; binary formats get each field overwritten. Each parser must return or raise only its
declared error type.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account

from syncline.blobstore.http_client import HttpBlobStore
from syncline.blobstore.store import BlobRef, BlobStoreError, InvalidBlobName
from syncline.chain.keys import from_private_key
from syncline.confidential.keystore import (
    load_data_keys,
    load_enclave_key,
    new_enclave_key,
    write_data_keys,
    write_enclave_keystore,
)
from syncline.confidential.manifest import (
    Enclave,
    ManifestError,
    SealedDatasetManifest,
    new_manifest,
    seal_dataset,
    with_enclaves,
)
from syncline.confidential.sealing import generate_enclave_keypair
from syncline.errors import KeyConfigError, SpecError
from syncline.privacy.noise import NoiseSeedError, RoundNoise
from syncline.privacy.opening import encode_opening, parse_opening
from syncline.privacy.sealed import Binding, Recipient, SealedOpeningError, parse_sealed_opening, seal_opening
from syncline.protocol.checkpoints import Checkpoint, CheckpointError, CheckpointManifest
from syncline.protocol.fixed_point import safetensors_spans
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.quantization import QuantizedGradient, quantize
from syncline.protocol.signed_messages import Commitment, Domain, Vote, sign
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.gossip import (
    GossipError,
    TrainerReport,
    decode_commitment,
    decode_report,
    decode_vote,
    encode_commitment,
    encode_report,
    encode_vote,
)
from syncline.run.state_file import StateFile
from syncline.sponsor.data_sources import DataSourceError, RecordFields, parse_csv, parse_jsonl

SUBSTITUTES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    2**70,
    10**400,
    "",
    "x",
    "\x00",
    [],
    [None],
    [1, 2, 3],
    {},
    {"a": None},
    [[{"b": [1]}]],
    {"dtype": None, "shape": None, "data_offsets": None},
)
"""What an adversary puts where a value is expected."""


def mutants(doc: Any) -> Iterator[Any]:
    """``doc`` with each value (at every depth, the whole document included) replaced by each
    substitute, and each key of each object dropped."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node[:4]):  # a long list's items are alike
                walk(v, (*path, i))

    walk(doc, ())
    for path in paths:
        for sub in SUBSTITUTES:
            yield _replaced(doc, path, sub)
        if path:
            out = copy.deepcopy(doc)
            parent = _at(out, path[:-1])
            if isinstance(parent, dict):
                del parent[path[-1]]
                yield out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(doc)
    _at(out, path[:-1])[path[-1]] = copy.deepcopy(value)
    return out


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


Errors = type[BaseException] | tuple[type[BaseException], ...]


def only(parse: Callable[[], object], errors: Errors, what: str) -> None:
    """``parse()`` returns or raises ``errors``; anything else fails the test, naming the input."""
    try:
        parse()
    except errors:
        pass
    except Exception as exc:  # the class this suite closes
        raise AssertionError(f"{what}: {type(exc).__name__}: {str(exc)[:200]}") from exc


def fuzz_json(doc: Any, parse: Callable[[bytes], object], errors: Errors, name: str) -> int:
    count = 0
    for mutant in mutants(doc):
        only(lambda m=mutant: parse(_dumps(m)), errors, f"{name} {_dumps(mutant)[:300]!r}")
        count += 1
    return count


def fuzz_binary(data: bytes, parse: Callable[[bytes], object], errors: Errors, name: str, *, step: int = 4) -> int:
    """Each ``step``-byte field of ``data`` overwritten with zeros, ones, a big length and junk."""
    count = 0
    fills = (b"\x00" * 8, b"\xff" * 8, struct.pack(">Q", 1 << 40), struct.pack("<Q", 1 << 40), b"[null]{}")
    for offset in range(0, len(data), step):
        for fill in fills:
            mutant = data[:offset] + fill[: min(8, len(data) - offset)] + data[offset + 8 :]
            only(lambda m=mutant: parse(m), errors, f"{name} at byte {offset} with {fill!r}")
            count += 1
    return count


# ---------------------------------------------------------------------- safetensors headers


def _split_safetensors(data: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _join_safetensors(header: Any, body: bytes) -> bytes:
    text = _dumps(header)
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


LAYOUT = ParameterLayout.from_state_dict({"w": torch.zeros(3, 2), "b": torch.zeros(5)})


def test_safetensors_headers_of_payloads_states_and_state_files(tmp_path: Path) -> None:
    """Item 2/3's parser: ``"data_offsets": null`` raised TypeError in ``safetensors_spans``."""
    g = quantize(torch.linspace(-1, 1, LAYOUT.numel), 8)
    payload = g.to_safetensors_bytes()
    header, body = _split_safetensors(payload)
    n = fuzz_json(
        header,
        lambda h: QuantizedGradient.from_safetensors_bytes(_join_safetensors(json.loads(h), body), expected_numel=11),
        ValueError,
        "payload header",
    )
    expected = {"values": (torch.int8, (LAYOUT.numel,)), "exponents": (torch.uint8, (1,))}
    n += fuzz_json(
        header,
        lambda h: safetensors_spans(
            _join_safetensors(json.loads(h), body), len(_join_safetensors(json.loads(h), body)), expected
        ),
        ValueError,
        "safetensors_spans",
    )
    state = TrainingState.from_model_state_dict({"w": torch.ones(3, 2), "b": torch.ones(5)}, LAYOUT).to_bytes()
    header, body = _split_safetensors(state)
    metadata_layout = json.loads(header["__metadata__"]["layout"])
    n += fuzz_json(
        header,
        lambda h: TrainingState.from_bytes(_join_safetensors(json.loads(h), body), expected_layout=LAYOUT),
        ValueError,
        "state header",
    )

    def with_layout(text: bytes) -> bytes:
        h = copy.deepcopy(header)
        h["__metadata__"]["layout"] = text.decode()
        return _join_safetensors(h, body)

    n += fuzz_json(metadata_layout, lambda t: TrainingState.from_bytes(with_layout(t)), ValueError, "state layout")
    path = tmp_path / "state.safetensors"

    def open_file(h: bytes) -> StateFile:
        path.write_bytes(_join_safetensors(json.loads(h), body))
        return StateFile.open(path, LAYOUT)

    n += fuzz_json(header, open_file, ValueError, "state file")
    assert n > 1000


def test_the_issue_26_header_is_refused_with_the_module_error() -> None:
    g = quantize(torch.linspace(-1, 1, LAYOUT.numel), 8)
    header, body = _split_safetensors(g.to_safetensors_bytes())
    for junk in (None, 7, "0,4", [1], [None, None], [0, 2**70], [-1, 3], [True, False]):
        header["values"]["data_offsets"] = junk
        with pytest.raises(ValueError, match="data_offsets"):
            QuantizedGradient.from_safetensors_bytes(_join_safetensors(header, body))


# ---------------------------------------------------------------------- checkpoints and manifests


def test_checkpoint_headers() -> None:
    from syncline.protocol.checkpoints import MAGIC, InnerHyperparameters

    n = LAYOUT.numel
    ckpt = Checkpoint(
        step=4,
        layout_digest=LAYOUT.digest(),
        params=torch.ones(n),
        exp_avg=torch.zeros(n),
        exp_avg_sq=torch.zeros(n),
        adam_steps=(4, 4),
        optimizer=InnerHyperparameters(lr=3e-3, beta1=0.9, beta2=0.95, weight_decay=0.01, eps=1e-8, batch_size=8),
        dtype="fp32",
        threads=1,
        rng_state=bytes(range(64)),
    )
    raw = ckpt.to_bytes()
    Checkpoint.from_bytes(raw, layout=LAYOUT)
    (header_len,) = struct.unpack("<Q", raw[8:16])
    header, body = json.loads(raw[16 : 16 + header_len]), raw[16 + header_len :]

    def parse(text: bytes) -> Checkpoint:
        text += b" " * (-len(text) % 8)
        return Checkpoint.from_bytes(MAGIC + struct.pack("<Q", len(text)) + text + body, layout=LAYOUT)

    assert fuzz_json(header, parse, CheckpointError, "checkpoint header") > 100
    fuzz_binary(raw[:16], lambda d: Checkpoint.from_bytes(d + raw[16:], layout=LAYOUT), CheckpointError, "ckpt")


def test_checkpoint_manifests() -> None:
    hashes = tuple(bytes([i]) * 32 for i in range(4))
    noise = RoundNoise.derive(b"\x01" * 32, task_id=7, round_=0, fragment=1, interval=2, inner_steps=6).commitment()
    doc = json.loads(CheckpointManifest(2, 6, hashes, ("u",) * 4, noise=noise).to_json())
    assert fuzz_json(doc, CheckpointManifest.from_json, CheckpointError, "manifest") > 100


# ---------------------------------------------------------------------- gossip records, blob references


DOMAIN = Domain(31337, "0x" + "ab" * 20)


def test_commitment_vote_and_report_records() -> None:
    account = Account.create()
    commitment = Commitment(7, 1, 2, b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, "blob://x")
    vote = Vote(7, 1, b"\x04" * 32, b"\x05" * 32, b"\x06" * 32, 3, 1234)
    c = json.loads(encode_commitment(commitment, sign(account, DOMAIN, commitment)))
    v = json.loads(encode_vote(vote, sign(account, DOMAIN, vote)))
    n = fuzz_json(c, lambda d: decode_commitment(d, DOMAIN), GossipError, "commitment")
    n += fuzz_json(v, lambda d: decode_vote(d, DOMAIN), GossipError, "vote")
    report = TrainerReport(task_id=7, round=1, fragment=2, loss=0.5, steps=3, tokens=10, train_seconds=1.0)
    r = json.loads(encode_report(report, from_private_key("0x" + "11" * 32)))
    n += fuzz_json(r, decode_report, GossipError, "report")
    ref = {"digest": "0x" + "ab" * 32, "size": 3, "uri": "blob://x"}
    n += fuzz_json(ref, lambda d: BlobRef.from_json(json.loads(d)), InvalidBlobName, "blob ref")
    assert n > 300


# ---------------------------------------------------------------------- blob service answers


class _Answers(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        self._answer()

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: object) -> None:
        pass


def test_blob_service_answers() -> None:
    """The client's reading of an alias lookup and of an upload's answer (the blob service is
    untrusted: a hostile one answers anything)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = HttpBlobStore(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5)
        digest = "0x" + "ab" * 32

        def lookup(body: bytes) -> object:
            _Answers.body = body
            return store.candidates("alias-x", signers=[Account.create().address])

        def upload(body: bytes) -> object:
            _Answers.body = body
            return store.put(b"abc")

        n = fuzz_json({"candidates": [digest, digest], "digest": digest}, lookup, BlobStoreError, "alias answer")
        n += fuzz_json({"digest": digest, "size": 3, "uri": "x"}, upload, BlobStoreError, "put answer")
        assert n > 100
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------- sealed manifests, openings, keys


def test_sealed_dataset_manifests() -> None:
    dataset = seal_dataset([b"shard zero", b"shard one"], b"validation")
    _, pk = generate_enclave_keypair()
    manifest = with_enclaves(
        new_manifest(b"\x5e" * 32, dataset), dataset.data_keys, [Enclave(pk, b"\x4d" * 32, "trainer")], created_at=1
    )
    doc = json.loads(manifest.canonical_bytes())
    assert fuzz_json(doc, SealedDatasetManifest.parse, ManifestError, "sealed manifest") > 100


def test_openings_and_sealed_openings() -> None:
    noise = RoundNoise.derive(b"\x09" * 32, task_id=7, round_=4, fragment=1, interval=2, inner_steps=6)
    opening = encode_opening(noise, 2)
    n = fuzz_binary(opening, lambda d: parse_opening(d, interval=2, segments=3), NoiseSeedError, "opening")
    key = new_enclave_key()
    sealed = seal_opening(
        opening, Binding(7, 4, 1, 2, noise.commitment()), [Recipient.of(Account.create().address, key.pubkey)]
    )
    n += fuzz_binary(sealed, parse_sealed_opening, SealedOpeningError, "sealed opening")
    assert n > 100


def test_keystore_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local files, but read back after any crash or copy: a damaged one is one KeyConfigError line."""
    from syncline.confidential import keystore

    monkeypatch.setattr(keystore, "SCRYPT_N", 2)  # the KDF's cost is not what is tested
    enclave = tmp_path / "enclave.json"
    write_enclave_keystore(new_enclave_key(), enclave, "pw", scrypt_n=2)
    doc = json.loads(enclave.read_text())
    target = tmp_path / "mutant.json"

    def load_key(data: bytes) -> object:
        target.write_bytes(data)
        return load_enclave_key(target, password="pw")

    n = fuzz_json(doc, load_key, KeyConfigError, "enclave keystore")
    keys = tmp_path / "keys.json"
    write_data_keys(keys, seal_dataset([b"a"], b"v"), "pw")
    doc = json.loads(keys.read_text())

    def load_keys(data: bytes) -> object:
        target.write_bytes(data)
        return load_data_keys(target, password="pw")

    n += fuzz_json(doc, load_keys, KeyConfigError, "data-key store")
    assert n > 100


# ---------------------------------------------------------------------- spec artifacts, data files


def test_spec_artifacts() -> None:
    from conftest import OFFLINE_DEADLINE, OFFLINE_WITNESSES, build_spec

    spec = build_spec(witnesses=OFFLINE_WITNESSES, enrollment_deadline=OFFLINE_DEADLINE)
    doc = json.loads(spec.canonical_bytes())
    doc["privacy"] = {"epsilon": 5.0, "delta": 1e-5, "clip_norm": 1.0, "sample_rate": 0.1}
    TrainingTaskSpec.from_artifact(_dumps(doc))
    started = time.perf_counter()
    assert fuzz_json(doc, TrainingTaskSpec.from_artifact, SpecError, "spec") > 500
    assert time.perf_counter() - started < 10


def test_jsonl_and_csv_records() -> None:
    fields = RecordFields(prompt="prompt", response="response")
    row = {"prompt": "hi", "response": "there"}
    n = fuzz_json(row, lambda d: list(parse_jsonl(d + b"\n" + d, "data.jsonl", fields)), DataSourceError, "jsonl")
    for mutant in mutants(row):
        if not isinstance(mutant, dict):
            continue
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(list(mutant))
        writer.writerow([json.dumps(v) if not isinstance(v, str) else v for v in mutant.values()])
        text = out.getvalue().encode()
        only(lambda t=text: list(parse_csv(t, "data.csv", fields)), DataSourceError, "csv")
        n += 1
    assert n > 50
