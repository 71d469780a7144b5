"""The run pages a newcomer reads, in a real browser against a real devnet (issue 13, "Web UI").

No agents: the tests drive the market directly (post, enroll, commit, vote, seal, withdraw), so a
sealed run with a receipt, a withdrawal and a loss curve, and a running run with challenges, exist
in seconds. The API indexes them; Chromium renders them; every figure is checked against the chain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from web3 import Web3

from conftest import build_spec, commit, finalize, start_task, travel_past
from syncline.api.server import ApiServer, ApiSettings
from syncline.api.specs import onchain_spec
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
    challenged_posted_at: int
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
        challenged, receipts = start_task(market, sponsor, spec2, witnesses, trainers)
        posted_at = int(w3.eth.get_block(receipts[0]["blockNumber"])["timestamp"])
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
            yield World(url, w3, market, signers, sealed, challenged, posted_at, spec.trainer_stake_wei, withdrawn)
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
    page.goto(f"{world.url}/#/runs/{world.sealed}/receipt")  # settled: stakes returned, credits paid
    tid(page, "credits-table").locator("tbody tr[data-testid^=credit-row-]").first.wait_for()
    for table in ("receipt-table", "credits-table"):
        problems = page.eval_on_selector(f'[data-testid="{table}"]', CLIPPED_CELLS)
        assert problems == [], f"{table}: " + "\n".join(problems)
    page.goto(f"{world.url}/#/runs/{world.sealed}")
    tid(page, "round-row-9").wait_for()
    for table in ("rounds-table", "trainers-table", "witnesses-table"):
        problems = page.eval_on_selector(f'[data-testid="{table}"]', CLIPPED_CELLS)
        assert problems == [], f"{table} (sealed): " + "\n".join(problems)
    assert page_errors == []


def eth_text_to_wei(text: str) -> int:
    """The first amount in ``text`` ('1.5 ETH', '0.25') in wei."""
    match = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    assert match, f"no amount in {text!r}"
    whole, _, frac = match.group(0).replace(",", "").partition(".")
    return int(whole) * ETH + int((frac + "0" * 18)[:18] or 0)


def utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_times_carry_their_date(world: World, browser: Any, page_errors: PageErrors) -> None:
    page = open_page(browser, page_errors)
    page.goto(world.url + "/#/")
    row = tid(page, f"run-row-{world.challenged}")
    row.wait_for()
    assert utc(world.challenged_posted_at) in row.inner_text()
    page.goto(f"{world.url}/#/runs/{world.sealed}")
    tid(page, "round-row-9").wait_for()
    closed_at = world.market.round(world.sealed, 9).closed_at
    assert utc(closed_at) in tid(page, "round-row-9").inner_text()
    deadline = onchain_spec(world.market.spec_tuple(world.sealed))["enrollment_deadline"]
    assert utc(deadline) in tid(page, "run-enrollment-deadline").inner_text()  # not unix seconds
    metas = page.locator('[data-testid="run-timeline"] .tl-meta').all_inner_texts()
    assert metas and all(re.match(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} · block \d+", m) for m in metas), metas
    assert page_errors == []


def test_an_unknown_run_says_so_without_actions(world: World, browser: Any, page_errors: PageErrors) -> None:
    page = open_page(browser, page_errors)
    unknown = world.market.task_count() + 1
    for path in (f"#/runs/{unknown}", f"#/runs/{unknown}/challenge", f"#/runs/{unknown}/receipt"):
        page.goto(f"{world.url}/{path}")
        missing = tid(page, "run-missing")
        missing.wait_for(timeout=10_000)
        assert "No such run" in missing.inner_text() and f"unknown task id {unknown}" in missing.inner_text()
        main = page.locator("main").inner_text()
        assert "Loading" not in main, path
        # Nothing to act on: no buttons, no action links, no form; only the way back to the runs.
        assert page.locator("main button, main select, main input, main .btn").count() == 0, path
        assert tid(page, "error").count() == 0, path
    # The browser logs the failed fetches (404) as console errors; nothing else may appear.
    assert all("404" in e for e in page_errors), page_errors


def test_a_sealed_runs_challenge_page_says_the_window_closed(
    world: World, browser: Any, page_errors: PageErrors
) -> None:
    page = open_page(browser, page_errors)
    page.goto(f"{world.url}/#/runs/{world.sealed}/challenge")
    notice = tid(page, "challenge-closed")
    notice.wait_for(timeout=10_000)
    assert "challenge window closed" in notice.inner_text() and "sealed" in notice.inner_text()
    assert tid(page, "challenge-build").count() == 0
    assert page.get_by_role("button", name="Build proof").count() == 0
    # A running run's round still inside its window offers the build as before.
    page.goto(f"{world.url}/#/runs/{world.challenged}/challenge")
    tid(page, "challenge-build").wait_for()
    assert not tid(page, "challenge-closed").is_visible()
    assert page_errors == []


def test_a_sealed_runs_trainers_and_witnesses_show_their_stake_returned(
    world: World, browser: Any, page_errors: PageErrors
) -> None:
    page = open_page(browser, page_errors)
    page.goto(f"{world.url}/#/runs/{world.sealed}")
    receipt = world.market.receipt(world.sealed)
    for line in receipt.trainers:
        address = line.trainer.lower()
        row = tid(page, f"trainer-row-{address}")
        row.wait_for()
        assert world.market.trainer(world.sealed, address).stake_wei == 0  # credited back at seal
        text = row.inner_text().lower()
        assert "sealed" in text and "active" not in text, text
        stake = tid(page, f"trainer-stake-{address}").inner_text()
        assert "returned" in stake
        assert eth_text_to_wei(stake) == line.stake_refund_wei == world.stake_wei
    for w in receipt.witnesses:  # the witnesses' bonds came back too
        address = w.witness.lower()
        assert world.market.witness(world.sealed, address).bond_wei == 0
        bond = tid(page, f"witness-bond-{address}")
        bond.wait_for()
        assert "returned" in bond.inner_text(), bond.inner_text()
        assert eth_text_to_wei(bond.inner_text()) == w.bond_wei - w.slashed_wei > 0
    assert page_errors == []


def test_the_receipt_says_what_a_withdrawal_paid(world: World, browser: Any, page_errors: PageErrors) -> None:
    page = open_page(browser, page_errors)
    page.goto(f"{world.url}/#/runs/{world.sealed}/receipt")
    paid_by = world.signers[1].address.lower()
    row = tid(page, f"credit-row-{paid_by}")
    row.wait_for()
    assert world.market.credit_of(paid_by) == 0
    assert eth_text_to_wei(tid(page, f"credit-{paid_by}").inner_text()) == 0
    match = re.search(r"paid ([\d.,]+) ETH \(withdrawn\)", row.inner_text())
    assert match, row.inner_text()
    assert eth_text_to_wei(match.group(1)) == world.withdrawn_wei
    line = next(t for t in world.market.receipt(world.sealed).trainers if t.trainer.lower() == paid_by)
    assert eth_text_to_wei(tid(page, f"credited-{paid_by}").inner_text()) == line.reward_wei + line.stake_refund_wei
    # Another trainer has not withdrawn: its credit is claimable, nothing paid yet.
    waiting = world.signers[2].address.lower()
    assert "not yet withdrawn" in tid(page, f"credit-row-{waiting}").inner_text()
    assert eth_text_to_wei(tid(page, f"credit-{waiting}").inner_text()) == world.market.credit_of(waiting) > 0
    assert page_errors == []


def test_the_post_form_takes_eth_and_a_date_time(world: World, browser: Any, page_errors: PageErrors) -> None:
    """Amounts are typed in ETH and reach the chain to the wei; the enrollment deadline is a
    date-time, not unix seconds; bad amounts get a one-line reason."""
    page = open_page(browser, page_errors)
    page.goto(world.url + "/#/post")
    tid(page, "post-form").wait_for()
    template = page.request.get(world.url + "/api/template").json()
    pool = page.locator('[name="reward_pool_wei"]')
    assert eth_text_to_wei(pool.input_value()) == int(template["spec"]["reward_pool_wei"])
    assert re.fullmatch(r"\d+(\.\d{1,18})?", pool.input_value()), pool.input_value()  # ETH, not 18-digit wei
    deadline = page.locator('[name="enrollment_deadline"]')
    assert deadline.get_attribute("type") == "datetime-local"
    # A datetime-local value drops ":00" seconds (HTML's valid normalized form): compare the instants.
    shown = datetime.fromisoformat(deadline.input_value()).replace(tzinfo=UTC)
    # The default counts from the chain's next-block time (the pending block's, which moves with the
    # clock) when the page fetched its template: a few seconds before this test's own fetch.
    expected = datetime.fromtimestamp(int(template["spec"]["enrollment_deadline"]), UTC)
    assert 0 <= (expected - shown).total_seconds() <= 10, (shown, expected)

    for text, reason in (
        ("abc", "not an amount in ETH"),
        ("-1", "must not be negative"),
        ("1e3", "without an exponent"),
        ("1,5", "use a dot for decimals"),
        ("0.0000000000000000001", "at most 18 decimals"),
    ):
        pool.fill(text)
        error = tid(page, "field-error-reward_pool_wei")
        error.wait_for()
        assert reason in error.inner_text(), (text, error.inner_text())
        assert tid(page, "post-submit").is_disabled()

    # 1 ETH + 1 wei: a float would round the wei away.
    pool.fill("1.000000000000000001")
    assert tid(page, "field-error-reward_pool_wei").count() == 0
    page.locator('[name="trainer_stake_wei"]').fill("0.25")
    when = (chain_time(world.w3) + 2 * 86_400) // 60 * 60
    deadline.fill(utc(when).replace(" ", "T")[:16])
    assert tid(page, "field-error-enrollment_deadline").count() == 0
    page.fill('[name="name"]', "eth-and-a-date")
    tid(page, "post-submit").click()
    tid(page, "posted-task-id").wait_for(timeout=120_000)
    task_id = int(tid(page, "posted-task-id").inner_text().strip())
    spec = onchain_spec(world.market.spec_tuple(task_id))
    assert world.market.task(task_id).reward_pool_wei == ETH + 1
    assert int(spec["trainer_stake_wei"]) == ETH // 4
    assert spec["enrollment_deadline"] == when
    assert page_errors == []


@pytest.mark.parametrize("width", [1280, 1024])
def test_the_loss_axes_include_the_final_value(world: World, browser: Any, page_errors: PageErrors, width: int) -> None:
    """The x axis is labelled up to the final round, the y axis carries the final validation loss,
    and the note under the chart states it (rounds 0..9 of the sealed run, falling to 2.07)."""
    page = open_page(browser, page_errors, width)
    page.goto(f"{world.url}/#/runs/{world.sealed}")
    chart = tid(page, "loss-chart")
    chart.locator("canvas").first.wait_for()
    final = METRICS[-1] / 1e6
    last_round = len(METRICS) - 1
    x_ticks = [int(t) for t in (chart.get_attribute("data-x-ticks") or "").split(",") if t]
    assert x_ticks and x_ticks[0] == 0 and x_ticks[-1] == last_round, x_ticks
    y_ticks = [float(t) for t in (chart.get_attribute("data-y-ticks") or "").split(",") if t]
    assert any(abs(t - final) < 1e-9 for t in y_ticks), y_ticks
    # The top of the curve (round 0's loss, above every round tick) is labelled too, and the axis
    # names its unit (issue 26: "no unit and an unlabeled top tick").
    assert any(abs(t - METRICS[0] / 1e6) < 1e-9 for t in y_ticks), y_ticks
    assert "nats" in (chart.get_attribute("data-y-label") or ""), chart.get_attribute("data-y-label")
    y_min, y_max = (float(v) for v in (chart.get_attribute("data-y-range") or "nan,nan").split(","))
    assert y_min < final < y_max and y_min < METRICS[0] / 1e6 < y_max
    assert f"Final validation loss {final:.4f} (round {last_round})" in tid(page, "loss-note").inner_text()
    assert page_errors == []
