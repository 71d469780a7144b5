"""The receipt page says plainly when a run trained nothing, and shows late commits (issue 26
item 10), in a real browser against a real devnet and the real API server.

Two sealed runs, driven on the market directly: one where nobody ever committed (every round
closed empty after its one extension: no fee, the initial state), one whose round 0 was committed
late by every trainer (inside the extension) and whose round 1 was on time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from conftest import build_spec, commit, finalize, start_task, travel_past
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import chain_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.protocol.enums import TaskStatus

from .conftest import FRONTEND_DIST, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]


@dataclass
class Runs:
    url: str
    market: MarketClient
    empty: int
    late: int


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    workdir = tmp_path_factory.mktemp("ui-trained-nothing")
    with start_anvil(workdir / "anvil", accounts=10) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        w3 = devnet.web3()
        signers = [from_private_key(k) for k in devnet.private_keys()]
        market = MarketClient.from_deployment(deploy_market(w3, signers[0], devnet.rpc_url, workdir), w3)
        sponsor, trainers, witnesses = signers[0], signers[1:4], signers[4:7]
        addresses = tuple(w.address for w in witnesses)

        def spec(name: str) -> Any:
            return build_spec(witnesses=addresses, enrollment_deadline=chain_time(w3) + 3600, name=name, rounds=2)

        empty, _ = start_task(market, sponsor, spec("nothing-trained"), witnesses, trainers)
        for rnd in range(2):
            travel_past(w3, market.round_deadline(empty) + 3 * 300)  # past the one extension
            market.carry_forward(sponsor, empty, rnd)
        travel_past(w3, market.task(empty).last_closed_at + 600)
        market.seal(sponsor, empty)

        late, _ = start_task(market, sponsor, spec("late-run"), witnesses, trainers)
        travel_past(w3, market.round_deadline(late))  # nobody in time: round 0 extends
        for rnd in range(2):
            for fragment, trainer in enumerate(trainers):
                commit(market, trainer, late, rnd, fragment)
            finalize(market, w3, witnesses[:2], late, rnd, 0b111)
        travel_past(w3, market.task(late).last_closed_at + 600)
        market.seal(sponsor, late)
        assert market.task(empty).status == market.task(late).status == TaskStatus.SEALED

        server = ApiServer(
            ApiSettings(
                deployment=workdir / "deployment.json",
                blob_store=service.url,
                db_url=f"sqlite:///{workdir / 'index.db'}",
                port=0,
                frontend_dir=FRONTEND_DIST,
                poll_interval_s=0.3,
                state_dir=workdir / "api",
            )
        )
        url = server.start()
        server.wait_indexed()
        try:
            yield Runs(url, market, empty, late)
        finally:
            server.stop()
            service.stop()


def test_a_run_that_trained_nothing_says_so(runs: Runs, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    page.goto(f"{runs.url}/#/runs/{runs.empty}/receipt")
    banner = page.get_by_test_id("receipt-trained-nothing")
    banner.wait_for()
    text = banner.inner_text()
    assert "trained nothing" in text and "initial" in text
    assert "0 finalized, 2 carried forward of 2" in text
    assert page.get_by_test_id("receipt-late").count() == 0
    assert page_errors == []


def test_late_commits_show_on_the_receipt(runs: Runs, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    page.goto(f"{runs.url}/#/runs/{runs.late}/receipt")
    page.get_by_test_id("receipt-late").wait_for()
    assert page.get_by_test_id("receipt-late").inner_text().startswith("3 late commits")
    assert page.get_by_test_id("receipt-trained-nothing").count() == 0
    for line in runs.market.receipt(runs.late).trainers:
        row = page.get_by_test_id(f"receipt-row-trainer-{line.trainer.lower()}")
        assert "2/2 accepted, 0 missed, 1 late" in row.inner_text()
    assert page_errors == []
