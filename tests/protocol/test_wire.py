"""Every parser of network bytes is bounded: deep nesting is refused with one clear error, never a crash.

Issue 10 finding 7: ``py_ecc`` (through web3) raised the recursion limit to 100,000, and about
120,000 nested ``[`` in a safetensors header, a checkpoint, a manifest, a state blob or a spec
artifact overflowed the C stack (SIGSEGV). The crash tests run each parser in a subprocess (a
SIGSEGV would kill pytest); the fuzz tests feed every parser random and adversarial bytes and
accept only the parser's documented error type or a valid result.
"""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncline.blobstore.http_client import _parse_json
from syncline.blobstore.store import BlobUnavailable
from syncline.errors import SpecError
from syncline.protocol.checkpoints import MAGIC, Checkpoint, CheckpointError, CheckpointManifest
from syncline.protocol.fixed_point import write_safetensors
from syncline.protocol.quantization import QuantizedGradient
from syncline.protocol.signed_messages import Domain
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import STATE_FORMAT, TrainingState
from syncline.protocol.wire import WireFormatError, json_depth, load_bounded_json
from syncline.run.gossip import GossipError, decode_commitment, decode_report, decode_vote

WORKER = Path(__file__).with_name("_wire_worker.py")
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------- the crash, in subprocesses


def test_the_recursion_limit_is_sane_after_importing_the_agents() -> None:
    code = (
        "import sys, web3, syncline.chain.market, syncline.api.app, syncline.run.loop; print(sys.getrecursionlimit())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert int(out.stdout.strip()) <= 4_000, out.stdout
    assert sys.getrecursionlimit() <= 4_000  # this process imported web3 and syncline too


@pytest.mark.parametrize(
    ("parser", "refusal"),
    [
        ("safetensors", "refused WireFormatError: safetensors header nests deeper than"),
        ("state_layout", "refused WireFormatError: state metadata 'layout' nests deeper than"),
        ("checkpoint", "refused CheckpointError: checkpoint header nests deeper than"),
        ("manifest", "refused CheckpointError: manifest nests deeper than"),
        ("spec_artifact", "refused SpecError: spec artifact nests deeper than"),
        ("api_body", '"request body nests deeper than 16 levels", "status": 422'),
    ],
)
def test_deeply_nested_json_is_refused_not_a_crash(parser: str, refusal: str) -> None:
    """Before the fix each of these died with SIGSEGV (rc -11); the API answered a misleading 422."""
    out = subprocess.run(
        [sys.executable, str(WORKER), parser], capture_output=True, text=True, timeout=120, cwd=WORKER.parents[2]
    )
    assert out.returncode == 0, f"{parser}: exit {out.returncode} (-11 is SIGSEGV)\n{out.stderr[-2000:]}"
    assert refusal in out.stdout, out.stdout


# ---------------------------------------------------------------------- the helper itself

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@FUZZ
@given(json_values)
def test_valid_json_round_trips_and_its_depth_is_exact(value: Any) -> None:
    text = json.dumps(value).encode()
    assert json_depth(text, limit=1_000) == _depth(value)
    assert load_bounded_json(text, max_bytes=len(text), max_depth=max(_depth(value), 1)) == value
    if _depth(value) > 1:
        with pytest.raises(WireFormatError, match="nests deeper than"):
            load_bounded_json(text, max_bytes=len(text), max_depth=_depth(value) - 1)


def test_brackets_inside_strings_do_not_count_and_limits_are_one_line() -> None:
    text = json.dumps({"a": '[[[[{{{{\\"[[[', "b": ["]]]]"]}).encode()
    assert json_depth(text, limit=10) == 2
    assert load_bounded_json(text, max_bytes=100, max_depth=2)["b"] == ["]]]]"]
    for data, message in [
        (b"x" * 11, "is 11 bytes, more than the limit of 10"),
        (b"[" * 5 + b"]" * 5, "nests deeper than 4 levels"),
        (b"\xff", "is not JSON: not UTF-8"),
        (b"{", "is not JSON"),
        (b"1" * 5000, "is not JSON"),  # int() refuses more than 4300 digits
    ]:
        with pytest.raises(WireFormatError, match=message) as err:
            load_bounded_json(data, max_bytes=10 if len(data) == 11 else 10_000, max_depth=4)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "data",
    [
        b'"' + b'\\"' * 500_000,  # one unterminated string full of escaped quotes
        b'"' * 1_000_000,
        b"[]" * 500_000,
        b'["' * 500_000,
        b"\\" * 1_000_000,
        b"[" * 1_000_000,
    ],
    ids=["escaped-quotes", "quotes", "flat-brackets", "bracket-quote", "backslashes", "deep"],
)
def test_the_depth_scan_is_linear_on_adversarial_megabytes(data: bytes) -> None:
    """A first version skipped strings with a regex that rescanned from every quote: 80 KB of
    escaped quotes took 17 s (quadratic)."""
    import time

    started = time.perf_counter()
    with contextlib.suppress(WireFormatError):
        load_bounded_json(data, max_bytes=len(data), max_depth=8)
    assert time.perf_counter() - started < 1.0


# ---------------------------------------------------------------------- fuzz every parser of network bytes


def _nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * depth + close * depth


adversarial_json = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 200_000).map(_nested),
    st.integers(1, 50_000).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
    st.integers(1, 200_000).map(lambda d: b"[" * d),  # unterminated
    st.binary(max_size=256),
    st.sampled_from([b"1" * 5000, b'"\\ud800"', b"NaN", b"[1e999999]", b"\xef\xbb\xbf{}", b"{" + b'"a":1,' * 1000]),
)


def _length_prefixed(header: bytes, declared: int | None) -> bytes:
    return struct.pack("<Q", len(header) if declared is None else declared) + header


lengths = st.none() | st.integers(0, 2**64 - 1)


def _refuses_or_parses(parse: Callable[[], Any], errors: type[BaseException] | tuple[type[BaseException], ...]) -> None:
    with contextlib.suppress(errors):
        parse()


@FUZZ
@given(adversarial_json, lengths, st.binary(max_size=64))
def test_fuzz_safetensors_payloads(header: bytes, declared: int | None, tail: bytes) -> None:
    data = _length_prefixed(header, declared) + tail
    _refuses_or_parses(lambda: QuantizedGradient.from_safetensors_bytes(data), ValueError)
    _refuses_or_parses(lambda: QuantizedGradient.from_safetensors_bytes(data, expected_numel=4), ValueError)


@FUZZ
@given(adversarial_json, st.sampled_from([STATE_FORMAT, "other"]))
def test_fuzz_state_blobs(layout: bytes, fmt: str) -> None:
    zeros = torch.zeros(4, dtype=torch.int64)
    text = layout.decode("utf-8", "replace")
    data = write_safetensors({"weights": zeros, "momentum": zeros}, {"format": fmt, "layout": text})
    _refuses_or_parses(lambda: TrainingState.from_bytes(data), ValueError)


@FUZZ
@given(adversarial_json, lengths, st.binary(max_size=64))
def test_fuzz_checkpoints(header: bytes, declared: int | None, tail: bytes) -> None:
    padded = header + b" " * (-len(header) % 8)
    data = MAGIC + _length_prefixed(padded, declared) + tail
    _refuses_or_parses(lambda: Checkpoint.from_bytes(data), CheckpointError)


@FUZZ
@given(
    adversarial_json
    | json_values.map(
        lambda v: json.dumps({"format": v, "hashes": v, "inner_steps": v, "interval": v, "uris": v}).encode()
    )
)
def test_fuzz_checkpoint_manifests(data: bytes) -> None:
    _refuses_or_parses(lambda: CheckpointManifest.from_json(data), CheckpointError)


@FUZZ
@given(adversarial_json)
def test_fuzz_spec_artifacts(data: bytes) -> None:
    _refuses_or_parses(lambda: TrainingTaskSpec.from_artifact(data), SpecError)


DOMAIN = Domain(31337, "0x" + "ab" * 20)


@FUZZ
@given(
    adversarial_json
    | st.tuples(st.sampled_from(["Commitment", "Vote", "TrainerReport"]), json_values).map(
        lambda t: json.dumps({"type": t[0], "taskId": t[1], "round": 1, "signature": t[1], "loss": t[1]}).encode()
    )
)
def test_fuzz_gossip_messages(data: bytes) -> None:
    _refuses_or_parses(lambda: decode_commitment(data, DOMAIN), GossipError)
    _refuses_or_parses(lambda: decode_vote(data, DOMAIN), GossipError)
    _refuses_or_parses(lambda: decode_report(data), GossipError)


@FUZZ
@given(adversarial_json)
def test_fuzz_blob_service_answers(data: bytes) -> None:
    _refuses_or_parses(lambda: _parse_json(data, "PUT /blobs", "http://127.0.0.1:1"), BlobUnavailable)


def _api_app() -> Any:
    """The API's own middleware and error handlers around a route with a real request schema."""
    from fastapi import FastAPI

    from syncline.api.errors import install_error_handlers
    from syncline.api.middleware import BodyLimit
    from syncline.api.schemas import ChallengeRequest
    from syncline.api.settings import MAX_BODY_BYTES

    app = FastAPI()
    install_error_handlers(app)

    @app.post("/build")
    def build(body: ChallengeRequest) -> dict[str, Any]:
        return {"round": body.round}

    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    return app


API_APP = _api_app()


def _post(body: bytes) -> tuple[int, Any]:
    import asyncio

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/build",
        "raw_path": b"/build",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(API_APP(scope, receive, send))
    return int(sent[0]["status"]), json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


@FUZZ
@given(
    adversarial_json
    | json_values.map(lambda v: json.dumps({"round": v, "kind": "censorship", "fragment": v}).encode())
    | st.integers(60_000, 70_000).map(lambda n: b"[" * n)
)
def test_fuzz_api_request_bodies(body: bytes) -> None:
    status, answer = _post(body)
    assert status in (200, 413, 422), (status, answer)
    if status != 200:
        assert set(answer) == {"error", "status"} and "\n" not in answer["error"]
