"""What a new user trips over on the run, challenge and post pages (issue 26: finding 13, the
under-filled task of finding 11, and the "as tried by a new user" UI items), in a real browser
against a real devnet, real contracts and the real API server.

No agents: the tests drive the market directly, so each page state exists in seconds: a running
run mid-round (round 0 finalized, one commit pending in round 1, a 1-wei witness fee), a run that
has not started, two under-filled tasks, and an idle devnet whose latest block is 45 minutes old.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from web3 import Web3

from conftest import build_spec, commit, finalize, start_task, travel_past
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore
from syncline.chain.deployment import deploy_market
from syncline.chain.devnet import chain_time, dev_rpc, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.protocol.enums import TaskStatus

from .conftest import FRONTEND_DIST, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]

ETH = 10**18
GWEI = 10**9
TEXT_HAS = "(document.querySelector('[data-testid=%s]')?.innerText || '').includes('%s')"


@dataclass
class World:
    url: str
    rpc_url: str
    workdir: Path
    blob_url: str
    w3: Web3
    market: MarketClient
    signers: list[Signer]
    running: int  # round 0 finalized, trainer 0 committed to round 1 (pending)
    waiting: int  # enrolling, deadline a week away: no round yet
    underfilled: int  # 1 of 3 trainers; cancelled from the browser
    frontrun: int  # 1 of 3 trainers; someone else's cancel lands first
    deadline: int  # the under-filled tasks' enrollment deadline


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("ui-new-user")
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        w3 = devnet.web3()
        signers = [from_private_key(k) for k in devnet.private_keys()]
        deployment = deploy_market(w3, signers[0], devnet.rpc_url, workdir)
        market = MarketClient.from_deployment(deployment, w3)
        sponsor, trainers, witnesses = signers[0], signers[1:4], signers[4:7]
        addresses = tuple(w.address for w in witnesses)
        now = chain_time(w3)

        # Running, mid-round: the witness fee is 1 wei, so fees and the budget are dust amounts.
        spec = build_spec(
            witnesses=addresses, enrollment_deadline=now + 3600, name="mid-round", rounds=3, witness_fee_wei=1
        )
        running, _ = start_task(market, sponsor, spec, witnesses, trainers)
        for fragment, trainer in enumerate(trainers):
            commit(market, trainer, running, 0, fragment)
        finalize(market, w3, witnesses[:2], running, 0, 0b111, metrics=[3_500_000, 3_500_000])
        commit(market, trainers[0], running, 1, 0)  # round 1 open: this commit is not decided yet

        # Not started: enrolling, its deadline a week away.
        waiting, _ = market.post_task(
            sponsor, build_spec(witnesses=addresses, enrollment_deadline=now + 7 * 86400, name="waiting"), "ipfs://spec"
        )

        # Two under-filled tasks: 3 trainers needed, 1 enrolled.
        deadline = chain_time(w3) + 900
        few = build_spec(witnesses=addresses, enrollment_deadline=deadline, min_trainers=3, max_trainers=3, name="few")
        underfilled, _ = market.post_task(sponsor, few, "ipfs://spec")
        frontrun, _ = market.post_task(sponsor, few.with_updates(name="few-2"), "ipfs://spec")
        for task in (underfilled, frontrun):
            market.enroll(trainers[1], task)

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
            yield World(
                url,
                devnet.rpc_url,
                workdir,
                service.url,
                w3,
                market,
                signers,
                running,
                waiting,
                underfilled,
                frontrun,
                deadline,
            )
        finally:
            server.stop()
            service.stop()


def tid(page: Any, test_id: str) -> Any:
    return page.get_by_test_id(test_id)


def open_page(browser: Any, page_errors: PageErrors) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, timezone_id="UTC", locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(20_000)
    page_errors.attach(page)
    return page


def test_run_and_challenge_pages_explain_money_progress_and_stakes(
    world: World, browser: Any, page_errors: PageErrors
) -> None:
    page = open_page(browser, page_errors)
    page.goto(f"{world.url}/#/runs/{world.running}")
    trainer0 = world.signers[1].address.lower()
    row = tid(page, f"trainer-row-{trainer0}")
    row.wait_for()
    tid(page, "round-row-1").wait_for()

    # Acceptance counts closed rounds only: round 0 accepted, round 1's commit is still pending.
    assert world.market.trainer(world.running, trainer0).submitted == 2
    cells = row.locator("td").all_inner_texts()
    assert "100%" in cells, cells

    # "Escrow held" says what it holds; the fee budget says what was spent of what.
    label = tid(page, "escrow-label")
    assert "stakes" in label.inner_text() and "bonds" in (label.get_attribute("title") or "")
    budget = tid(page, "fee-budget").inner_text()
    # 1 wei x threshold 2 x 3 rounds = 6 wei; two witnesses matched round 0.
    assert budget.startswith("spent 2 wei of 6 wei") and "4 wei left" in budget, budget

    # Dust amounts read as wei, not 0.000000000000000001 ETH.
    fees = [tid(page, f"witness-row-{w.address.lower()}").locator("td").last.inner_text() for w in world.signers[4:6]]
    assert fees == ["1 wei", "1 wei"], fees
    # The witnesses' vote count is explained against what a witness's log says.
    assert "witness.voted" in tid(page, "witnesses-note").inner_text()

    # The timeline's first entry is wholly visible in its scroll box.
    page.wait_for_function("document.querySelectorAll('[data-testid=run-timeline] li').length >= 3")
    clipped = page.eval_on_selector(
        "[data-testid=run-timeline]",
        """ol => {
             const box = ol.parentElement.getBoundingClientRect();
             const r = ol.firstElementChild.getBoundingClientRect();
             const out = r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
             return out ? `${r.top}..${r.bottom} outside ${box.top}..${box.bottom}` : null;
           }""",
    )
    assert clipped is None, clipped

    # The loss chart's y axis has a unit, and every y tick is labelled.
    chart = tid(page, "loss-chart")
    chart.locator("canvas").first.wait_for()
    assert "nats" in (chart.get_attribute("data-y-label") or ""), chart.get_attribute("data-y-label")

    # The challenge page says what is at stake before anything is built or sent.
    page.goto(f"{world.url}/#/runs/{world.running}/challenge")
    stakes = tid(page, "challenge-stakes")
    stakes.wait_for()
    assert tid(page, "challenge-proof").count() == 0
    assert tid(page, "challenge-bond").get_attribute("data-wei") == str(ETH // 10)
    page.select_option('[data-testid="challenge-kind"]', "censorship")
    text = stakes.inner_text()
    assert "0.1 ETH" in text and "bond is lost" in text and "If the fault is proven" in text, text

    # A run with no round: nothing to challenge or download, and the buttons say why.
    page.goto(f"{world.url}/#/runs/{world.waiting}")
    tid(page, "run-status").wait_for()
    for link in ("link-challenge", "link-model"):
        el = tid(page, link)
        assert el.get_attribute("aria-disabled") == "true", link
        assert el.get_attribute("href") is None and "not started" in (el.get_attribute("title") or ""), link
    assert page_errors == []


def test_an_underfilled_task_is_cancelled_from_the_run_page(
    world: World, browser: Any, page_errors: PageErrors
) -> None:
    """Finding 11: past its deadline with 1 of 3 trainers, the run page offers "Cancel and
    refund"; afterwards the trainer's stake and the sponsor's escrow are claimable. Finding 13: a
    cancel that passed its simulation but lost the race on chain shows the decoded error."""
    travel_past(world.w3, world.deadline)
    sponsor, trainer = world.signers[0].address.lower(), world.signers[2].address.lower()
    page = open_page(browser, page_errors)

    # Someone else's cancel lands first, in the same block: the browser's reverts on chain.
    page.goto(f"{world.url}/#/runs/{world.frontrun}")
    tid(page, "underfilled").wait_for()
    dev_rpc(world.w3, "evm_setAutomine", [False])
    try:
        tid(page, "cancel-underfilled").click()
        page.wait_for_function(TEXT_HAS % ("run-tx", "submitted"))
        data = world.market.contract.encode_abi("cancelUnderfilled", args=[world.frontrun])
        world.w3.eth.send_transaction(
            {
                "from": Web3.to_checksum_address(world.signers[7].address),
                "to": world.market.contract.address,
                "data": data,
                "gas": 1_000_000,
                "maxPriorityFeePerGas": 100 * GWEI,
                "maxFeePerGas": 1000 * GWEI,
            }
        )
        dev_rpc(world.w3, "evm_mine", [])
    finally:
        dev_rpc(world.w3, "evm_setAutomine", [True])
    reason = tid(page, "run-tx-reason")
    page.wait_for_function(TEXT_HAS % ("run-tx-reason", "Syncline"))
    assert "SynclineWrongTaskStatus" in reason.inner_text(), reason.inner_text()
    assert "SynclineWrongTaskStatus" in tid(page, "error").inner_text()

    # The browser's own cancel of the other one.
    credit_before = world.market.credit_of(sponsor)
    page.goto(f"{world.url}/#/runs/{world.underfilled}")
    notice = tid(page, "underfilled")
    notice.wait_for()
    assert "Under-filled: can be cancelled" in notice.inner_text() and "1 of the 3" in notice.inner_text()
    assert tid(page, "run-status").inner_text() == "underfilled"
    tid(page, "cancel-underfilled").click()
    page.wait_for_function("document.querySelector('[data-testid=run-tx]')?.dataset.state === 'done'")
    assert world.market.task(world.underfilled).status == TaskStatus.CANCELLED
    page.wait_for_function("document.querySelector('[data-testid=run-status]')?.innerText === 'cancelled'")
    assert tid(page, "underfilled").count() == 0
    task = world.market.spec_tuple(world.underfilled)
    assert world.market.credit_of(trainer) == 2 * ETH  # its stake in each cancelled task
    assert world.market.credit_of(sponsor) - credit_before == 3 * ETH + (ETH // 100) * 2 * 4, task
    page.goto(f"{world.url}/#/runs/{world.underfilled}/receipt")
    claim = tid(page, f"claim-{trainer}")
    claim.wait_for()
    assert claim.is_enabled()
    assert page_errors == [] or all("404" in e for e in page_errors), page_errors


def test_an_idle_devnet_posts_with_the_default_deadline(world: World, browser: Any, page_errors: PageErrors) -> None:
    """Finding 13: anvil mines only when a transaction arrives, so after 45 idle minutes its
    latest block is 45 minutes old; the default enrollment deadline must still be in the future
    when the postTask is mined."""
    dev_rpc(world.w3, "evm_increaseTime", [45 * 60])  # the next block is 45 min after the latest
    page = open_page(browser, page_errors)
    page.goto(world.url + "/#/post")
    tid(page, "post-form").wait_for()
    page.fill('[name="name"]', "after-an-idle-hour")
    tid(page, "post-submit").click()
    page.wait_for_function(
        "document.querySelector('[data-testid=posted-task-id]')"
        " || document.querySelector('[data-testid=post-progress] li[data-state=failed]')",
        timeout=120_000,
    )
    progress = tid(page, "post-progress").inner_text()
    assert tid(page, "posted-task-id").count() == 1, progress
    task_id = int(tid(page, "posted-task-id").inner_text())
    assert world.market.task(task_id).status == TaskStatus.ENROLLING
    assert page_errors == []


def test_an_empty_runs_list_says_when_the_index_is_catching_up(
    world: World, browser: Any, page_errors: PageErrors
) -> None:
    """A market with no task yet, behind an API whose index lags the chain: the runs list says it
    is indexing, not "No runs yet"."""
    workdir = world.workdir / "second"
    workdir.mkdir()
    deploy_market(world.w3, world.signers[0], world.rpc_url, workdir)
    server = ApiServer(
        ApiSettings(
            deployment=workdir / "deployment.json",
            blob_store=world.blob_url,
            db_url=f"sqlite:///{workdir / 'index.db'}",
            port=0,
            frontend_dir=FRONTEND_DIST,
            poll_interval_s=120,  # one pass at start, then none during this test
            state_dir=workdir / "api",
        )
    )
    url = server.start()
    try:
        deadline = time.monotonic() + 30
        while True:  # the first pass (at start) reached the head
            health = json.loads(urllib.request.urlopen(url + "/healthz", timeout=5).read())
            if health["indexed_block"] >= health["head_block"] > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        dev_rpc(world.w3, "anvil_mine", [50])  # the chain moves on; the index does not for 120 s
        page = open_page(browser, page_errors)
        page.goto(url + "/#/")
        empty = tid(page, "runs-empty")
        empty.wait_for()
        assert "Indexing the chain" in empty.inner_text() and "No runs yet" not in empty.inner_text(), (
            empty.inner_text()
        )
    finally:
        server.stop()
    assert page_errors == []
