"""The blob service holds against uploads from a few outside addresses (issue 26, finding 8).

Before the fix, slow uploads from two source addresses (about 2.5 MiB/s in all) held all eight
upload slots, so honest uploads got 503 for as long as they kept trickling; one anonymous client
could upload until the disk was full (honest uploads then 507); and an alias took any number of
signers' slots, each lookup scanning them all (2,000 slots: 22-48 ms and growing).

Real sockets: Linux routes all of 127.0.0.0/8 to loopback, so clients bind source addresses in
different /24 networks (127.0.N.x). ``127.0.0.1`` (and ``::1``) is exempt from the per-client
limits by default (every devnet agent connects from it), so no test client uses it unless the
test switches the exemption off.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from syncline.blobstore import (
    AliasFull,
    BlobService,
    BlobUnavailable,
    HttpBlobStore,
    LocalBlobStore,
    digest_of,
    put_signed,
)
from syncline.blobstore.store import MAX_SIGNER_SLOTS


class RateUpload(threading.Thread):
    """Announces a ``length``-byte upload from ``source`` and sends it at ``rate`` bytes/s until the
    service answers (kept in :attr:`status_line` / :attr:`answer`) or ``stop`` is set."""

    def __init__(self, port: int, source: str, *, rate: int, length: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.source, self.rate, self.length, self.stop = port, source, rate, length, stop
        self.answer = b""
        self.started = 0.0
        self.ended = 0.0

    @property
    def status_line(self) -> bytes:
        return self.answer.split(b"\r\n", 1)[0]

    def _complete(self) -> bool:
        head, sep, body = self.answer.partition(b"\r\n\r\n")
        length = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        return bool(sep) and len(body) >= (int(length[0]) if length else 0)

    def run(self) -> None:
        chunk = b"x" * 8192
        self.started = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", self.port), source_address=(self.source, 0)) as sock:
                sock.sendall(f"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: {self.length}\r\n\r\n".encode())
                sock.setblocking(False)
                sent = 0
                while not self.stop.is_set() and sent < self.length:
                    try:
                        self.answer = sock.recv(4096)
                        break  # an answer (or the end of the connection)
                    except BlockingIOError:
                        pass
                    due = self.started + sent / self.rate
                    if time.monotonic() < due:
                        time.sleep(min(0.02, due - time.monotonic()))
                        continue
                    try:
                        sent += sock.send(chunk[: self.length - sent])
                    except BlockingIOError:
                        time.sleep(0.01)
                sock.setblocking(True)
                sock.settimeout(2)
                if not self.answer and not self.stop.is_set():
                    self.answer = sock.recv(4096)
                while self.answer and not self._complete():  # the body may come in another segment
                    more = sock.recv(4096)
                    if not more:
                        break
                    self.answer += more
        except OSError:
            pass
        self.ended = time.monotonic()


def put_from(port: int, source: str, data: bytes, *, timeout: float = 20.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("PUT", "/blobs", body=data, headers={"Content-Length": str(len(data))})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


# ---------------------------------------------------------------------- upload slots


def test_slow_uploads_from_two_addresses_cannot_hold_every_slot(tmp_path: Path, stop: threading.Event) -> None:
    """16 uploads from two addresses at 160 KiB/s each (2.5 MiB/s in all) hold at most a quarter
    of the slots each: an honest client from a third network uploads at once."""
    with BlobService(LocalBlobStore(tmp_path), request_timeout_s=3.0) as service:
        attackers = [
            RateUpload(service.port, source, rate=160 * 1024, length=64 << 20, stop=stop)
            for source in ("127.0.0.2", "127.0.1.2")
            for _ in range(8)
        ]
        for a in attackers:
            a.start()
        time.sleep(0.5)  # every attack upload holds a slot or waits for one
        for i in range(3):
            data = f"honest upload {i}".encode() * 5000
            started = time.monotonic()
            status, _, body = put_from(service.port, "127.0.2.2", data)
            assert status == 200, body
            assert json.loads(body)["digest"] == digest_of(data)
            assert time.monotonic() - started < 1.0  # a free slot at once (before: 503 or a wait)
        assert service.max_uploads_per_client == 2 and service.max_uploads_per_network == 4
        stop.set()
        for a in attackers:
            a.join(10)


def test_the_slowest_upload_is_cut_when_an_honest_one_waits(tmp_path: Path, stop: threading.Event) -> None:
    """Eight slow uploads from eight networks take every slot; an honest upload that waits gets
    the slot of the slowest one (cut with 503) once it has had its grace period."""
    with BlobService(
        LocalBlobStore(tmp_path), request_timeout_s=10.0, slow_upload_grace_s=1.0, max_connections_per_client=64
    ) as service:
        attackers = [
            RateUpload(service.port, f"127.0.{10 + i}.2", rate=32 * 1024 * (i + 1), length=64 << 20, stop=stop)
            for i in range(8)
        ]
        for a in attackers:
            a.start()
        time.sleep(0.5)
        data = b"honest" * 10000
        started = time.monotonic()
        status, _, body = put_from(service.port, "127.0.30.2", data)
        took = time.monotonic() - started
        assert status == 200, body
        # the grace period (1 s after the slot; about 2-3 s in all), not the 10 s request timeout: a
        # loaded 2-core machine gets 6 s (3.02 s was seen in a fresh clone's make test)
        assert took < 6.0, took
        time.sleep(0.3)
        cut = [a for a in attackers if a.status_line.startswith(b"HTTP/1.1 503")]
        assert len(cut) == 1, [a.status_line for a in attackers]
        assert cut[0] in attackers[:2], [(a.rate, a.status_line) for a in attackers]  # one of the slowest
        assert b"upload cut" in cut[0].answer
        stop.set()


def test_an_upload_ends_by_the_total_deadline(tmp_path: Path, stop: threading.Event) -> None:
    """An upload fast enough for every rate floor still ends at ``max_upload_s`` (408)."""
    with BlobService(LocalBlobStore(tmp_path), max_upload_s=1.5) as service:
        upload = RateUpload(service.port, "127.0.3.2", rate=2 << 20, length=1 << 30, stop=stop)
        upload.start()
        upload.join(10)
        assert upload.status_line.startswith(b"HTTP/1.1 408"), upload.answer
        assert b"upload too long" in upload.answer
        assert upload.ended - upload.started < 10.0  # not the 512 s the upload would take (slack for a loaded machine)


def test_loopback_agents_are_not_capped_per_client(tmp_path: Path) -> None:
    """Every devnet agent connects from 127.0.0.1: eight concurrent uploads from it all proceed."""
    with BlobService(LocalBlobStore(tmp_path), request_timeout_s=5.0) as service:
        client = HttpBlobStore(service.url)
        blobs = [bytes([i]) * (64 << 10) for i in range(8)]
        results: list[str] = []
        threads = [threading.Thread(target=lambda b=b: results.append(client.put(b).digest)) for b in blobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == sorted(digest_of(b) for b in blobs)


# ---------------------------------------------------------------------- byte quota


def test_an_anonymous_client_is_held_to_its_quota_and_honest_uploads_go_on(tmp_path: Path) -> None:
    """Before the fix one client uploaded until the disk was full (honest uploads: 507)."""
    with BlobService(
        LocalBlobStore(tmp_path), client_quota_bytes=1 << 20, network_quota_bytes=(5 << 20) // 2, quota_window_s=600
    ) as service:
        junk = iter(range(10**6))

        def fill(source: str) -> tuple[int, int, dict[str, str], bytes]:
            """Upload 256 KiB blobs from ``source`` until refused: (accepted, status, headers, body)."""
            for accepted in range(100):
                status, headers, body = put_from(service.port, source, next(junk).to_bytes(4, "big") * (1 << 16))
                if status != 200:
                    return accepted, status, headers, body
            raise AssertionError(f"{source} was never refused")

        accepted, status, headers, body = fill("127.0.0.2")
        assert (accepted, status) == (4, 429), body
        assert 1 <= int(headers["retry-after"]) <= 600
        assert b"quota of this client" in body
        assert fill("127.0.0.3")[:2] == (4, 429)  # another client of the same /24
        accepted, status, _, body = fill("127.0.0.4")  # the network's 2.5 MiB are spent after two
        assert (accepted, status) == (2, 429) and b"quota of the network 127.0.0.0/24" in body
        honest = b"honest state" * 30000
        status, _, body = put_from(service.port, "127.0.1.2", honest)
        assert status == 200 and json.loads(body)["digest"] == digest_of(honest)
        status, _, body = put_from(service.port, "127.0.1.3", b"y" * ((1 << 20) + 1))
        assert status == 413 and b"exceeds the upload quota" in body  # never fits: no point retrying


def test_the_blob_client_waits_for_retry_after(tmp_path: Path) -> None:
    """The agents' client retries a 429 after the service's ``Retry-After`` instead of failing."""
    with BlobService(
        LocalBlobStore(tmp_path),
        exempt_clients="",
        client_quota_bytes=600_000,
        network_quota_bytes=0,
        quota_window_s=2.0,
    ) as service:
        client = HttpBlobStore(service.url)
        started = time.monotonic()
        refs = [client.put(bytes([i]) * 400_000) for i in range(3)]
        assert [r.digest for r in refs] == [digest_of(bytes([i]) * 400_000) for i in range(3)]
        assert time.monotonic() - started >= 1.0  # it waited for the bucket to refill
        impatient = HttpBlobStore(service.url, max_retry_wait_s=0.2)
        with pytest.raises(BlobUnavailable, match="stayed busy"):
            impatient.put(b"z" * 500_000)


# ---------------------------------------------------------------------- signers' slots


def _accounts(n: int, offset: int = 1) -> list[LocalAccount]:
    return [Account.from_key((offset + i).to_bytes(32, "big")) for i in range(n)]


def _junk_slots(store: LocalBlobStore, alias: str, first: int, count: int) -> None:
    """``count`` signers' slots written straight into the alias's directory, as a store without a
    bound held them after 2,000 signed uploads (each real upload costs an ecrecover, ~20 ms in the
    pure-Python backend)."""
    directory = store.aliases_dir / alias
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + count):
        digest = digest_of(f"junk {i}".encode())
        (directory / f"signed-0x{i:040x}").write_text(f"{digest}\n0x{'11' * 65}\n")


def test_signer_slots_per_alias_are_bounded_and_lookups_stay_fast(tmp_path: Path) -> None:
    """An alias holds at most 256 signers' slots (a new signer is refused, an old one can replace
    its candidate), and with 2,000 slots a lookup stays well under the 22-48 ms it took before."""
    store = LocalBlobStore(tmp_path, fsync=False)
    alias = "0x" + "ab" * 32
    honest = Account.from_key(b"\x77" * 32)
    _junk_slots(store, alias, 1, MAX_SIGNER_SLOTS - 2)
    put_signed(store, b"honest state", alias, honest)
    put_signed(store, b"junk signed", alias, _accounts(1)[0])  # the 256th slot
    assert store.signer_slots(alias) == MAX_SIGNER_SLOTS
    for junk in _accounts(3, offset=100):
        with pytest.raises(AliasFull, match=f"at most {MAX_SIGNER_SLOTS}"):
            put_signed(store, b"one too many", alias, junk)
    assert store.signer_slots(alias) == MAX_SIGNER_SLOTS
    put_signed(store, b"honest state v2", alias, honest)  # a signer with a slot can still replace it
    assert store.candidates(alias, signers=[honest.address])[0] == digest_of(b"honest state v2")
    _junk_slots(store, alias, 10_000, 2000 - MAX_SIGNER_SLOTS)  # what an unbounded store held
    timings = []
    for _ in range(200):
        started = time.perf_counter()
        found = store.candidates(alias, signers=[honest.address])
        timings.append(time.perf_counter() - started)
    assert found[0] == digest_of(b"honest state v2")
    assert len(found) == 1 + 32  # the named slot, then the 32 newest others
    assert statistics.median(timings) < 0.002, statistics.median(timings)
    # another store object on the same directory (another reader in the process) sees every write
    other = LocalBlobStore(tmp_path, fsync=False)
    other.candidates(alias, signers=[honest.address])
    put_signed(store, b"honest state v3", alias, honest)
    assert other.candidates(alias, signers=[honest.address])[0] == digest_of(b"honest state v3")


def test_a_new_signer_of_a_full_alias_gets_409_over_http(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path, fsync=False, max_signer_slots=3)
    alias = "checkpoints:0x" + "cd" * 32
    with BlobService(store) as service:
        client = HttpBlobStore(service.url)
        first = _accounts(4)
        for i, account in enumerate(first[:3]):
            put_signed(client, f"v{i}".encode(), alias, account)
        with pytest.raises(AliasFull, match="at most 3"):
            put_signed(client, b"one too many", alias, first[3])
        put_signed(client, b"v0 again", alias, first[0])
        assert client.candidates(alias, signers=[first[0].address])[0] == digest_of(b"v0 again")


def test_every_limit_is_a_flag_and_an_environment_variable(tmp_path: Path) -> None:
    from syncline.blobstore.__main__ import build_parser

    env = {"SYNCLINE_BLOBSTORE_CLIENT_QUOTA_BYTES": "12345", "SYNCLINE_BLOBSTORE_EXEMPT_CLIENTS": ""}
    args = build_parser(env).parse_args(["--root", str(tmp_path)])
    assert args.client_quota_bytes == 12345 and args.exempt_clients == ""
    assert args.max_signer_slots == MAX_SIGNER_SLOTS and args.max_upload_s == 3600.0
    args = build_parser(env).parse_args(["--root", str(tmp_path), "--client-quota-bytes", "7"])
    assert args.client_quota_bytes == 7  # the flag wins
    with pytest.raises(ValueError):  # main() reports it in one line and exits 1
        BlobService(LocalBlobStore(tmp_path), exempt_clients="not-an-address")
