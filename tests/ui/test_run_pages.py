"""The run pages a newcomer reads, in a real browser against a real devnet (issue 13, "Web UI").

No agents: the tests drive the market directly (post, enroll, commit, vote, seal, withdraw), so a
sealed run with a receipt, a withdrawal and a loss curve, and a running run with challenges, exist
in seconds. The API indexes them; Chromium renders them; every figure is checked against the chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from web3 import Web3

from conftest import build_spec, commit, finalize, start_task, travel_past
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import chain_time, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.protocol.enums import TaskStatus

from .conftest import FRONTEND_DIST, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ETH = 10**18
# Validation losses (x 1e6, as witnesses vote them) of the sealed run's rounds: the last is the lowest.
METRICS = [4_210_000, 3_870_000, 3_520_000, 3_340_000, 3_150_000, 2_980_000, 2_840_000, 2_610_000, 2_450_000, 2_070_000]


@dataclass
class World:
    url: str
    w3: Web3
    market: MarketClient
    signers: list[Signer]
    sealed: int  # sealed run; trainer 0 has withdrawn its credit
    challenged: int  # running run with an open censorship claim and an open training claim
    stake_wei: int
    withdrawn_wei: int


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("ui-pages")
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        w3 = devnet.web3()
        signers = [from_private_key(k) for k in devnet.private_keys()]
        deployment = deploy_market(w3, signers[0], devnet.rpc_url, workdir)
        market = MarketClient.from_deployment(deployment, w3)
        sponsor, trainers, witnesses, outsider = signers[0], signers[1:4], signers[4:7], signers[7]
        addresses = tuple(w.address for w in witnesses)

        # A sealed run of ten rounds with falling validation losses; one trainer then withdraws.
        spec = build_spec(
            witnesses=addresses, enrollment_deadline=chain_time(w3) + 3600, name="sealed-run", rounds=len(METRICS)
        )
        sealed, _ = start_task(market, sponsor, spec, witnesses, trainers)
        for rnd, metric in enumerate(METRICS):
            for fragment, trainer in enumerate(trainers):
                commit(market, trainer, sealed, rnd, fragment)
            finalize(market, w3, witnesses[:2], sealed, rnd, 0b111, metrics=[metric, metric])
        assert market.task(sealed).status == TaskStatus.AWAITING_SEAL
        travel_past(w3, market.task(sealed).last_closed_at + spec.challenge_window_s)
        market.seal(sponsor, sealed)
        withdrawn, _ = market.withdraw(trainers[0])

        # A running run with two open claims against round 0 (the challenges table has rows).
        spec2 = build_spec(witnesses=addresses, enrollment_deadline=chain_time(w3) + 3600, name="challenged-run")
        challenged, _ = start_task(market, sponsor, spec2, witnesses, trainers)
        for fragment, trainer in enumerate(trainers):
            commit(market, trainer, challenged, 0, fragment)
        travel_past(w3, market.round_deadline(challenged))
        for w in witnesses[:2]:
            market.finalize_round(w, challenged, 0, "0x" + "11" * 32, "0x" + "22" * 32, 0b011)
        market.challenge_censorship(outsider, challenged, 0, 2)
        market.challenge_training(outsider, challenged, 0, 0, 1)

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
            yield World(url, w3, market, signers, sealed, challenged, spec.trainer_stake_wei, withdrawn)
        finally:
            server.stop()
            service.stop()


def tid(page: Any, test_id: str) -> Any:
    return page.get_by_test_id(test_id)


def open_page(browser: Any, page_errors: PageErrors, width: int = 1280) -> Any:
    """A page in a UTC browser (dates in the text are predictable) at ``width`` x 800."""
    context = browser.new_context(viewport={"width": width, "height": 800}, timezone_id="UTC", locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page_errors.attach(page)
    return page


# Every header and cell of the table lies inside the visible box of its scroll container, the
# container inside the viewport, and no cell's content overflows the cell.
CLIPPED_CELLS = """
table => {
  const wrap = table.closest('.table-wrap') || table.parentElement;
  const box = wrap.getBoundingClientRect();
  const page = document.documentElement.scrollWidth;
  const out = [];
  if (box.right > innerWidth + 0.5) out.push(`container ends at ${box.right} > ${innerWidth}`);
  if (page > innerWidth) out.push(`the page scrolls sideways: ${page} > ${innerWidth}`);
  for (const cell of table.querySelectorAll('th, td')) {
    const r = cell.getBoundingClientRect();
    const name = `${cell.tagName} "${cell.innerText.trim().slice(0, 30)}"`;
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5)
      out.push(`${name} at ${r.left}..${r.right} outside ${box.left}..${box.right}`);
    if (cell.scrollWidth > cell.clientWidth + 1)
      out.push(`${name} content ${cell.scrollWidth} > ${cell.clientWidth}`);
  }
  if (out.length) {
    const heads = Array.from(table.querySelectorAll('thead th'));
    out.push('widths: ' + heads.map(c => `${c.innerText}=${Math.round(c.getBoundingClientRect().width)}`).join(' '));
  }
  return out;
}
"""


@pytest.mark.parametrize("width", [1280, 1024])
def test_tables_show_every_column_at_laptop_widths(
    world: World, browser: Any, page_errors: PageErrors, width: int
) -> None:
    page = open_page(browser, page_errors, width)
    page.goto(world.url + "/#/")
    tid(page, f"run-row-{world.challenged}").wait_for()
    problems = page.eval_on_selector('[data-testid="runs-table"]', CLIPPED_CELLS)
    assert problems == [], "\n".join(problems)
    page.goto(f"{world.url}/#/runs/{world.challenged}")
    tid(page, "challenges-table").locator("tbody tr[data-testid^=challenge-row-]").first.wait_for()
    for table in ("challenges-table", "rounds-table", "trainers-table", "witnesses-table"):
        problems = page.eval_on_selector(f'[data-testid="{table}"]', CLIPPED_CELLS)
        assert problems == [], f"{table}: " + "\n".join(problems)
    assert page_errors == []
