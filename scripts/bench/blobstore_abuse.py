"""Blob service under abuse: honest uploads during a slow-upload attack, and alias lookups with junk signers.

Issue 26, finding 8. A real :class:`~syncline.blobstore.BlobService` on loopback with its default
limits. Attack: eight uploads from two source addresses (127.0.0.2 and 127.0.1.2, two /24
networks) at 320 KiB/s each, 2.5 MiB/s in all, each reopened as soon as it ends. Meanwhile an
honest client (127.0.2.2) uploads 256 KiB blobs one after another; counted: how many got 200, and
their median latency. Then 2,000 junk signers each upload a signed candidate of one alias (real
EIP-191 signatures over HTTP), and the honest signer's lookup (``GET /aliases/<alias>?signer=``)
is timed.

Run it against the code to measure (``PYTHONPATH=<checkout>/agents``): the numbers before the fix
come from the same script run against the old tree. Prints the JSON and writes it to ``--json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from eth_account import Account

from syncline.blobstore import BlobService, BlobStoreError, HttpBlobStore, LocalBlobStore, put_signed

ATTACK_SOURCES = ("127.0.0.2", "127.0.1.2")
HONEST_SOURCE = "127.0.2.2"


def attacker(port: int, source: str, rate: int, stop: threading.Event, ends: list[str]) -> None:
    """Keeps one upload going from ``source`` at ``rate`` bytes/s, reopening it whenever it ends."""
    chunk = b"a" * 16384
    while not stop.is_set():
        answer = b""
        try:
            with socket.create_connection(("127.0.0.1", port), source_address=(source, 0), timeout=5) as sock:
                sock.sendall(b"PUT /blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n")
                sock.setblocking(False)
                started, sent = time.monotonic(), 0
                while not stop.is_set():
                    try:
                        answer = sock.recv(256)
                        break
                    except BlockingIOError:
                        pass
                    due = started + sent / rate
                    if time.monotonic() < due:
                        time.sleep(min(0.02, due - time.monotonic()))
                        continue
                    try:
                        sent += sock.send(chunk)
                    except BlockingIOError:
                        time.sleep(0.01)
        except OSError as exc:
            answer = type(exc).__name__.encode()
        ends.append(answer.split(b"\r\n", 1)[0].decode(errors="replace"))
        stop.wait(0.05)


def honest_put(port: int, data: bytes, timeout: float) -> tuple[int, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(HONEST_SOURCE, 0))
    try:
        conn.request("PUT", "/blobs", body=data, headers={"Content-Length": str(len(data))})
        answer = conn.getresponse()
        answer.read()
        status = answer.status
    except OSError:
        status = 0
    finally:
        conn.close()
    return status, time.monotonic() - started


def slot_attack(root: Path, duration_s: float) -> dict[str, Any]:
    with BlobService(LocalBlobStore(root)) as service:
        stop = threading.Event()
        ends: list[str] = []
        rate = (5 << 20) // 2 // 8  # 2.5 MiB/s over eight uploads
        threads = [
            threading.Thread(target=attacker, args=(service.port, source, rate, stop, ends), daemon=True)
            for source in ATTACK_SOURCES
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the attack holds its slots
        results: list[tuple[int, float]] = []
        until = time.monotonic() + duration_s
        i = 0
        while time.monotonic() < until:
            results.append(honest_put(service.port, i.to_bytes(4, "big") * (1 << 16), timeout=45))
            i += 1
            time.sleep(0.25)
        stop.set()
        for t in threads:
            t.join(10)
    ok = [took for status, took in results if status == 200]
    return {
        "attack_bytes_per_s": rate * len(threads),
        "attack_uploads": len(threads),
        "duration_s": duration_s,
        "honest_succeeded": len(ok),
        "honest_total": len(results),
        "honest_statuses": sorted({status for status, _ in results}),
        "honest_median_latency_s": round(statistics.median(ok), 4) if ok else None,
        "honest_median_latency_all_s": round(statistics.median([t for _, t in results]), 4) if results else None,
        "attack_uploads_ended": {line: ends.count(line) for line in sorted(set(ends))},
    }


def junk_signers(root: Path, signers: int, lookups: int) -> dict[str, Any]:
    alias = "0x" + "5e" * 32
    with BlobService(LocalBlobStore(root, fsync=False)) as service:
        client = HttpBlobStore(service.url)
        honest = Account.from_key(b"\x42" * 32)
        put_signed(client, b"the honest state", alias, honest)
        accepted = refused = 0
        started = time.monotonic()
        for i in range(signers):
            junk = Account.from_key((i + 1).to_bytes(32, "big"))
            try:
                put_signed(client, f"junk {i}".encode(), alias, junk)
                accepted += 1
            except BlobStoreError:
                refused += 1
        fill_s = time.monotonic() - started
        timings = []
        for _ in range(lookups):
            t0 = time.perf_counter()
            client.candidates(alias, signers=[honest.address])
            timings.append(time.perf_counter() - t0)
    timings.sort()
    return {
        "junk_signers": signers,
        "accepted": accepted,
        "refused": refused,
        "fill_s": round(fill_s, 1),
        "lookups": lookups,
        "lookup_median_ms": round(1000 * statistics.median(timings), 2),
        "lookup_p95_ms": round(1000 * timings[int(0.95 * (len(timings) - 1))], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=40.0, help="how long the slot attack runs")
    parser.add_argument("--signers", type=int, default=2000, help="junk signers of one alias")
    parser.add_argument("--lookups", type=int, default=200, help="timed alias lookups")
    parser.add_argument("--label", default="", help="a name for this run in the JSON (e.g. before / after)")
    parser.add_argument("--json", type=Path, default=Path("bench-results/blobstore_abuse.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "label": args.label,
            "slot_attack": slot_attack(Path(tmp) / "slots", args.duration_s),
            "alias_signers": junk_signers(Path(tmp) / "aliases", args.signers, args.lookups),
        }
    text = json.dumps(result, indent=2)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
