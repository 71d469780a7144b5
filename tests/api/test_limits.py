"""The API stays up and bounded: huge task ids, the costly prepare endpoint, a slow blob store, health.

Issue 10 finding 11: every ``/api/runs/{id}/*`` route answered 500 for ids >= 2**63 (SQLite
integers are 64-bit signed), and ``/api/tasks/prepare`` (seconds of CPU, unauthenticated) had no
bound. Finding 8: the indexer fetched ``specURI`` inline, so a slow blob store held the index
behind the chain while ``/healthz`` said ok.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from syncline.api import ApiServer, ApiSettings
from syncline.api.errors import ApiError
from syncline.api.limits import PrepareGate
from syncline.chain.deployment import Deployment
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient

from .conftest import Http, assert_error, deployment_file

pytestmark = pytest.mark.chain

RUN_ROUTES = ("", "/rounds", "/trainers", "/witnesses", "/challenges", "/losses", "/receipt", "/model")


def test_task_ids_beyond_int64_are_404_on_every_route(http: Http) -> None:
    """Before the fix each of these answered 500 (OverflowError from SQLite)."""
    for task_id in (2**63 - 1, 2**63, 2**64 + 5, 2**256 - 1):
        for suffix in RUN_ROUTES:
            assert_error(http.get(f"/api/runs/{task_id}{suffix}"), 404, f"unknown task id {task_id}")
        assert_error(http.get(f"/api/runs/{task_id}/state/0x" + "ab" * 32), 404, "unknown task id")
        build = http.post(f"/api/runs/{task_id}/challenges/build", {"round": 0, "kind": "censorship", "fragment": 0})
        assert_error(build, 404, "unknown task id")


def test_prepare_is_one_at_a_time_and_says_so(http: Http, api: ApiServer) -> None:
    """Before the fix a second prepare queued on a lock (a thread held per waiting request)."""
    template = http.ok("/api/template")  # a valid request: only the gate can refuse it
    body = {"spec": template["spec"], "corpus": template["corpus"], "model": template["model"]}
    gate = api.services.prepare_gate
    with gate.build("another-client"):  # a build is in progress
        started = time.monotonic()
        reply = http.request("POST", "/api/tasks/prepare", body, timeout=10)
        assert_error(reply, 429, "another task is being prepared")
        assert time.monotonic() - started < 2.0


def test_prepare_gate_rate_limits_each_client() -> None:
    now = [1000.0]
    gate = PrepareGate(2, clock=lambda: now[0])
    for _ in range(2):
        with gate.build("a"):
            pass
    limited = "at most 2 task preparations per minute per client; retry in 60 s"
    with pytest.raises(ApiError, match=limited) as err, gate.build("a"):
        pass
    assert err.value.status == 429
    with gate.build("b"):  # another client has its own budget
        pass
    now[0] += 60.5
    with gate.build("a"):  # the window moved on
        pass
    with gate.build("a"), pytest.raises(ApiError, match="another task is being prepared"), gate.build("b"):
        pass


def test_health_reports_the_head_the_lag_and_each_dependency(http: Http, api: ApiServer, w3: Web3) -> None:
    api.wait_indexed()
    health = http.ok("/healthz")
    assert health["status"] == "ok", health
    assert health["head_block"] >= int(w3.eth.block_number) - 1
    assert health["lag_blocks"] == max(0, health["head_block"] - health["indexed_block"])
    assert health["max_lag_blocks"] == api.services.settings.max_lag_blocks
    assert set(health["dependencies"]) == {"chain_rpc", "blob_store", "indexer", "enrichment"}
    assert all(d["ok"] for d in health["dependencies"].values()), health


# ---------------------------------------------------------------------- a slow blob store


class TrickleServer:
    """Accepts connections and sends one byte per 0.2 s of a never-ending HTTP answer."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100_000
        with conn:
            try:
                conn.recv(65536)
                for i in range(len(answer)):
                    if self.stop.wait(0.2):
                        return
                    conn.sendall(answer[i : i + 1])
            except OSError:
                return

    def __enter__(self) -> TrickleServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def trickle() -> Iterator[TrickleServer]:
    with TrickleServer() as server:
        yield server


def test_a_slow_blob_store_does_not_hold_the_index_and_health_says_so(
    trickle: TrickleServer,
    deployment: Deployment,
    api_state_dir: Path,
    market: MarketClient,
    sponsor: Signer,
    spec_factory: Any,
    w3: Web3,
    tmp_path: Path,
) -> None:
    """Before the fix the pass that found the task stalled on its spec fetch: the index stayed
    behind the head (the test's blocks were never indexed) while /healthz said ok."""
    settings = ApiSettings(
        deployment=deployment_file(deployment),
        blob_store=trickle.url,
        db_url=f"sqlite:///{tmp_path / 'index.db'}",
        port=0,
        poll_interval_s=0.1,
        frontend_dir=tmp_path / "no-frontend",
        state_dir=api_state_dir,
    )
    with ApiServer(settings) as server:
        http = Http(server.url)
        spec = spec_factory()
        task_id, _ = market.post_task(sponsor, spec, f"{trickle.url}/blobs/{spec.spec_hash}")
        time.sleep(1.0)  # the task is indexed and its spec fetch is trickling
        for _ in range(3):
            w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
        head = int(w3.eth.block_number)
        deadline = time.monotonic() + 5.0
        health = http.ok("/healthz")
        while health["indexed_block"] < head and time.monotonic() < deadline:
            time.sleep(0.1)
            health = http.ok("/healthz")
        assert health["indexed_block"] >= head, health
        assert health["status"] == "degraded", health
        assert not health["dependencies"]["blob_store"]["ok"]
        assert "deadline" in health["dependencies"]["blob_store"]["detail"], health
        assert health["dependencies"]["chain_rpc"]["ok"] and health["dependencies"]["indexer"]["ok"]
        detail = http.ok(f"/api/runs/{task_id}")
        assert detail["spec"]["artifact_verified"] is False
        trickle.stop.set()  # lets the enrichment worker's fetch end before the server stops
