"""The sponsor's whole journey in a real browser against a real devnet.

Headless Chromium opens the UI served by the API; the sponsor posts a task through the form (the
transaction is sent from anvil's unlocked development account, the UI's fallback with no wallet),
real trainer and witness agents train it, the detail page shows round 0 finalize, two colluding
witnesses finalize a forged round 1, and the sponsor challenges it from the challenge page (the
API builds the aggregation-fraud proof from public data, the browser sends it with the bond).
Every figure the UI shows is checked against the chain. Screenshots of the main pages are saved
under ``docs/img/``.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from web3 import Web3

from conftest import build_spec, commit, h32, start_task, travel_past, wait_for
from syncline.api.server import ApiServer, ApiSettings
from syncline.blobstore import BlobService, LocalBlobStore
from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.devnet import chain_time, increase_time, start_anvil
from syncline.chain.keys import from_private_key
from syncline.chain.market import MarketClient
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.protocol.enums import ChallengeKind, ChallengeStatus, RoundStatus, TaskStatus

from .conftest import FRONTEND_DIST, REPO, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]

# Screenshots go to $SYNCLINE_UI_SCREENSHOTS (docs/img when refreshing the README's pictures:
# `SYNCLINE_UI_SCREENSHOTS=docs/img .venv/bin/pytest tests/ui`), else to the test's temp dir.
SCREENSHOTS = os.environ.get("SYNCLINE_UI_SCREENSHOTS")
T = TypeVar("T")

# Small enough that three trainers finish a round in a few seconds on 2 cores.
PLAN = DemoPlan(
    rounds=3,
    inner_steps=8,
    checkpoint_interval=4,
    round_duration_s=16,
    grace_window_s=8,
    challenge_window_s=600,  # the contract's minimum; the test time-travels past it
    misbehave={"witness-1": "bad-aggregate", "witness-2": "bad-aggregate"},
    training_checks="off",
    witness_challenges=False,  # the fault is left for the sponsor to prove from the browser
)


@dataclass
class Stack:
    url: str
    w3: Web3
    market: MarketClient
    deployment: Deployment
    demo: TrainingDemo
    keys: list[str]
    blob_url: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("ui-e2e")
    with start_anvil(workdir / "anvil", accounts=12) as devnet:
        service = BlobService(LocalBlobStore(workdir / "blobs"), host="127.0.0.1", port=0)
        service.start()
        w3 = devnet.web3()
        keys = devnet.private_keys()
        deployment = deploy_market(w3, from_private_key(keys[0]), devnet.rpc_url, workdir)
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
        demo = TrainingDemo(workdir, PLAN)
        try:
            yield Stack(url, w3, MarketClient.from_deployment(deployment, w3), deployment, demo, keys, service.url)
        finally:
            demo._stop_agents()
            server.stop()
            service.stop()


def eth_text_to_wei(text: str) -> int:
    """'1.5 ETH' / '0.25' -> wei (the UI shows ETH with up to 18 decimals)."""
    match = re.search(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    assert match, f"no amount in {text!r}"
    whole, _, frac = match.group(0).partition(".")
    return int(whole) * 10**18 + int((frac + "0" * 18)[:18] or 0)


def shot(page: Any, name: str, tmp: Path) -> None:
    out = (REPO / SCREENSHOTS) if SCREENSHOTS else tmp
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / name), full_page=True)


def tid(page: Any, test_id: str) -> Any:
    return page.get_by_test_id(test_id)


# ---------------------------------------------------------------------- bad input stays in the form


def test_post_form_validates_like_the_contract(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    page.goto(stack.url + "/#/post")
    tid(page, "post-form").wait_for()
    assert "anvil development account" in tid(page, "wallet-banner").inner_text()

    # The open tier admits Mean only: the rule select offers nothing else.
    page.select_option('[name="tier"]', "open")
    rules = page.eval_on_selector_all('[name="aggregation.rule"] option', "os => os.map(o => o.value)")
    assert rules == ["mean"]
    page.select_option('[name="tier"]', "verified")
    rules = page.eval_on_selector_all('[name="aggregation.rule"] option', "os => os.map(o => o.value)")
    assert {"mean", "trimmed_mean", "coordinate_median"} <= set(rules)

    # A threshold above the number of witnesses is refused before anything is sent.
    page.fill('[name="threshold"]', "9")
    page.locator('[name="threshold"]').blur()
    tid(page, "field-error-threshold").wait_for()
    assert tid(page, "post-submit").is_disabled()
    page.fill('[name="threshold"]', "2")
    page.locator('[name="threshold"]').blur()
    page.fill('[name="min_trainers"]', "4")
    page.fill('[name="max_trainers"]', "3")
    page.locator('[name="max_trainers"]').blur()
    assert tid(page, "post-submit").is_disabled()
    page.fill('[name="min_trainers"]', "3")
    page.locator('[name="min_trainers"]').blur()
    page.fill('[name="reward_pool_wei"]', "-5")
    page.locator('[name="reward_pool_wei"]').blur()
    tid(page, "field-error-reward_pool_wei").wait_for()
    assert tid(page, "post-submit").is_disabled()
    page.fill('[name="reward_pool_wei"]', "1000")

    # A 1.1e9-parameter Llama (TinyLlama's shape) is within every bound; one of 138e9 is not, and
    # the form says so with the API's own count (limits.model.max_parameters), as does the API.
    tiny_llama = {
        "corpus.vocab_size": "32000",
        "model.hidden_size": "2048",
        "model.intermediate_size": "5632",
        "model.num_hidden_layers": "22",
        "model.num_attention_heads": "32",
        "model.num_key_value_heads": "4",
    }
    for name, value in tiny_llama.items():
        page.fill(f'[name="{name}"]', value)
        page.locator(f'[name="{name}"]').blur()
    model_errors = '[data-testid^="field-error-model."], [data-testid^="field-error-corpus."]'
    assert page.locator(model_errors).count() == 0
    for name, value in {
        "model.hidden_size": "8192",
        "model.intermediate_size": "32768",
        "model.num_hidden_layers": "128",
    }.items():
        page.fill(f'[name="{name}"]', value)
        page.locator(f'[name="{name}"]').blur()
    too_big = tid(page, "field-error-model.num_hidden_layers")
    too_big.wait_for()
    assert "parameters; at most 2,000,000,000" in too_big.inner_text()
    page.fill('[name="model.hidden_size"]', "16384")
    page.locator('[name="model.hidden_size"]').blur()
    assert "must be within 8..8192" in tid(page, "field-error-model.hidden_size").inner_text()
    assert tid(page, "post-submit").is_disabled()
    assert stack.market.task_count() == 0  # nothing reached the chain
    assert page_errors == []


# ---------------------------------------------------------------------- the journey


def test_sponsor_posts_watches_challenges_and_claims(
    stack: Stack, new_page: Any, page_errors: PageErrors, tmp_path: Path
) -> None:
    page, market = new_page, stack.market
    sponsor = from_private_key(stack.keys[0]).address.lower()

    # --- post a task through the form
    page.goto(stack.url + "/#/")
    tid(page, "runs-table").wait_for()
    tid(page, "nav-post").click()
    tid(page, "post-form").wait_for()
    page.select_option('[data-testid="account-select"]', sponsor)
    fields = {
        "name": "browser-e2e",
        "rounds": str(PLAN.rounds),
        "inner_steps": str(PLAN.inner_steps),
        "checkpoint_interval": str(PLAN.checkpoint_interval),
        "round_duration_s": str(PLAN.round_duration_s),
        "grace_window_s": str(PLAN.grace_window_s),
        "challenge_window_s": str(PLAN.challenge_window_s),
        "min_trainers": "3",
        "max_trainers": "3",
        "threshold": "2",
    }
    for name, value in fields.items():
        page.fill(f'[name="{name}"]', value)
    page.select_option('[name="tier"]', "verified")
    page.select_option('[name="aggregation.rule"]', "coordinate_median")
    shot(page, "post-task.png", tmp_path)
    tid(page, "post-submit").click()
    tid(page, "posted-task-id").wait_for(timeout=120_000)
    task_id = int(tid(page, "posted-task-id").inner_text().strip())
    tx = tid(page, "post-tx").inner_text().strip()
    assert re.fullmatch(r"0x[0-9a-f]{64}", tx)
    chain_task = market.task(task_id)
    assert chain_task.sponsor.lower() == sponsor
    assert chain_task.status == TaskStatus.ENROLLING
    spec = market.spec_tuple(task_id)
    assert spec[6] == 1 and spec[7] == 2  # tier verified, rule coordinate median
    assert stack.w3.eth.get_transaction_receipt(tx)["status"] == 1

    # --- the run appears in the list
    tid(page, "nav-runs").click()
    tid(page, f"run-row-{task_id}").wait_for()
    assert "enrolling" in tid(page, f"run-status-{task_id}").inner_text().lower()

    # --- agents train it: three honest trainers; witness-1 and witness-2 forge round 1
    for i, key in enumerate(stack.keys[1:4]):
        stack.demo._spawn("trainer", i, key, task_id, stack.deployment, stack.blob_url)
    for i, key in enumerate(stack.keys[4:7]):
        stack.demo._spawn("witness", i, key, task_id, stack.deployment, stack.blob_url)
    check = stack.demo._check_agents

    # --- watch round 0 finalize on the detail page
    page.goto(f"{stack.url}/#/runs/{task_id}")
    tid(page, "rounds-table").wait_for()
    wait_for(
        lambda: page.locator('[data-testid="round-row-0"][data-status="finalized"]').count() == 1,
        timeout_s=240,
        what="round 0 to show finalized",
        check=check,
    )
    r0 = market.round(task_id, 0)
    assert r0.status == RoundStatus.FINALIZED
    root_cell = tid(page, "round-root-0")
    assert r0.state_root in ((root_cell.get_attribute("title") or "") + root_cell.inner_text())
    tid(page, "loss-chart").locator("canvas").first.wait_for()

    # --- round 1 is finalized by the colluding witnesses with a forged state
    wait_for(
        lambda: page.locator('[data-testid="round-row-1"][data-status="finalized"]').count() == 1,
        timeout_s=240,
        what="round 1 to show finalized",
        check=check,
    )
    shot(page, "run-detail.png", tmp_path)

    # --- challenge it from the browser
    tid(page, "link-challenge").click()
    tid(page, "challenge-round").wait_for()
    page.select_option('[data-testid="challenge-round"]', "1")
    page.select_option('[data-testid="challenge-kind"]', "aggregation_fraud")
    tid(page, "challenge-build").click()
    tid(page, "challenge-proof").wait_for(timeout=120_000)
    assert "proveAggregationFraud" in tid(page, "challenge-proof").inner_text()
    tid(page, "challenge-submit").click()
    tid(page, "challenge-id").wait_for(timeout=60_000)
    challenge_id = int(tid(page, "challenge-id").inner_text().strip())
    shot(page, "challenge.png", tmp_path)
    ch = market.challenge(challenge_id)
    assert ch.kind == ChallengeKind.AGGREGATION_FRAUD
    assert ch.status == ChallengeStatus.UPHELD
    assert ch.challenger.lower() == sponsor

    # --- the detail page shows the verdict, the invalidation and the slashes, as the chain has them
    page.goto(f"{stack.url}/#/runs/{task_id}")
    wait_for(
        lambda: "upheld" in (tid(page, f"challenge-status-{challenge_id}").text_content() or "").lower(),
        timeout_s=30,
        what="the challenge to show upheld",
    )
    wait_for(
        lambda: page.locator('[data-testid="round-row-1"][data-status="invalidated"]').count() == 1,
        timeout_s=30,
        what="round 1 to show invalidated",
    )
    assert market.round(task_id, 1).status == RoundStatus.INVALIDATED
    for key in stack.keys[4:6]:
        addr = from_private_key(key).address.lower()
        slashed = market.witness(task_id, addr).slashed_wei
        assert slashed > 0
        assert eth_text_to_wei(tid(page, f"witness-slashed-{addr}").inner_text()) == slashed
    for key in stack.keys[1:4]:
        addr = from_private_key(key).address.lower()
        stake = market.trainer(task_id, addr).stake_wei
        assert eth_text_to_wei(tid(page, f"trainer-stake-{addr}").inner_text()) == stake

    # --- finish the run: only one witness has a bond left (k = 2), so the last round carries
    # forward; time travel past its deadline and the challenge window, the honest witness seals.
    def finished() -> bool:
        status = market.task(task_id).status
        if status != TaskStatus.SEALED:
            increase_time(stack.w3, PLAN.round_duration_s)
        return status == TaskStatus.SEALED

    wait_for(finished, timeout_s=240, what="the run to seal", check=check, interval_s=0.5)

    # --- receipt: payouts as on chain; the sponsor claims from the browser; the model downloads
    tid(page, "link-receipt").click()
    tid(page, "receipt-table").wait_for()
    wait_for(lambda: tid(page, f"credit-{sponsor}").count() == 1, timeout_s=30, what="the sponsor's credit")
    credit = market.credit_of(sponsor)
    assert credit > 0
    assert eth_text_to_wei(tid(page, f"credit-{sponsor}").inner_text()) == credit
    shot(page, "receipt.png", tmp_path)
    balance_before = stack.w3.eth.get_balance(Web3.to_checksum_address(sponsor))
    tid(page, f"claim-{sponsor}").click()
    wait_for(lambda: market.credit_of(sponsor) == 0, timeout_s=60, what="the claim to land")
    assert stack.w3.eth.get_balance(Web3.to_checksum_address(sponsor)) > balance_before
    wait_for(
        lambda: eth_text_to_wei(tid(page, f"credit-{sponsor}").inner_text()) == 0,
        timeout_s=30,
        what="the credit to show 0",
    )
    href = tid(page, "model-download").get_attribute("href")
    assert href
    response = page.request.get(href if href.startswith("http") else stack.url + "/" + href.lstrip("/"))
    assert response.status == 200
    with tarfile.open(fileobj=io.BytesIO(response.body()), mode="r:gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"config.json", "model.safetensors", "syncline.json"} <= names

    # --- the list reflects the end state
    tid(page, "nav-runs").click()
    wait_for(
        lambda: "sealed" in tid(page, f"run-status-{task_id}").inner_text().lower(),
        timeout_s=30,
        what="sealed in the list",
    )
    shot(page, "runs.png", tmp_path)
    assert page_errors == []


# ---------------------------------------------------------------------- a browser wallet signs

# An EIP-1193 provider as a wallet extension injects it: it answers account and chain requests
# itself and forwards the rest to the node. Its account is not one of anvil's development
# accounts; the test funds and impersonates it on anvil, which then accepts its transactions.
INJECTED_WALLET = """
window.ethereum = {
  isMetaMask: true,
  async request({ method, params }) {
    if (method === "eth_requestAccounts" || method === "eth_accounts") return [ACCOUNT];
    if (method === "wallet_switchEthereumChain" || method === "wallet_addEthereumChain") return null;
    window.__walletCalls = (window.__walletCalls || []).concat([method]);
    const response = await fetch(RPC, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: params || [] }),
    });
    const body = await response.json();
    if (body.error) throw Object.assign(new Error(body.error.message), body.error);
    return body.result;
  },
  on() {},
  removeListener() {},
};
"""


def test_injected_wallet_posts_the_task(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    page = new_page
    account = "0x" + "5e" * 20
    stack.w3.provider.make_request("anvil_setBalance", [account, hex(100 * 10**18)])  # type: ignore[arg-type]
    stack.w3.provider.make_request("anvil_impersonateAccount", [account])  # type: ignore[arg-type]
    rpc = stack.deployment.rpc_url
    page.add_init_script(INJECTED_WALLET.replace("ACCOUNT", repr(account)).replace("RPC", repr(rpc)))
    page.goto(stack.url + "/#/post")
    tid(page, "post-form").wait_for()
    banner = tid(page, "wallet-banner")
    wait_for(lambda: "Wallet: MetaMask" in banner.inner_text(), timeout_s=20, what="the wallet banner")
    connect = page.get_by_role("button", name="Connect wallet")
    if connect.is_visible():
        connect.click()
    wait_for(
        lambda: (
            account in page.eval_on_selector_all('[data-testid="account-select"] option', "os => os.map(o => o.value)")
        ),
        timeout_s=20,
        what="the wallet's account in the picker",
    )
    before = stack.market.task_count()
    page.fill('[name="name"]', "posted-from-a-wallet")
    tid(page, "post-submit").click()
    tid(page, "posted-task-id").wait_for(timeout=120_000)
    task_id = int(tid(page, "posted-task-id").inner_text().strip())
    assert task_id == before + 1
    assert stack.market.task(task_id).sponsor.lower() == account
    assert "eth_sendTransaction" in page.evaluate("window.__walletCalls")  # the wallet sent it
    assert page_errors == []


# ---------------------------------------------------------------------- closing challenges from the page


def test_resolve_and_expire_buttons_close_open_challenges(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    """An unanswered censorship claim is resolved (upheld) and an undecided training claim is
    expired from the run page once their deadlines pass; the chain agrees."""
    page, market, w3 = new_page, stack.market, stack.w3
    signers = [from_private_key(k) for k in stack.keys]
    sponsor, trainers, witnesses, outsider = signers[0], signers[1:4], signers[4:7], signers[7]
    spec = build_spec(
        witnesses=tuple(w.address for w in witnesses), enrollment_deadline=chain_time(w3) + 3600, name="closing"
    )
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    for fragment, trainer in enumerate(trainers):
        commit(market, trainer, task_id, 0, fragment)
    travel_past(w3, market.round_deadline(task_id))
    for w in witnesses[:2]:  # a quorum leaves fragment 2 out
        market.finalize_round(w, task_id, 0, h32("closing/state"), h32("closing/aggregate"), 0b011)
    censorship = market.challenge_censorship(outsider, task_id, 0, 2)
    training = market.challenge_training(outsider, task_id, 0, 0, 1)  # nobody referees it
    market.answer_training(trainers[0], training)  # the accused answered: undecided, it expires
    travel_past(w3, max(market.challenge(censorship).deadline, market.challenge(training).deadline))

    page.goto(f"{stack.url}/#/runs/{task_id}")
    page.select_option('[data-testid="account-select"]', sponsor.address.lower())  # anyone may close them
    tid(page, f"challenge-resolve-{censorship}").click()
    wait_for(
        lambda: market.challenge(censorship).status == ChallengeStatus.UPHELD,
        timeout_s=30,
        what="the censorship claim to be resolved",
    )
    tid(page, f"challenge-expire-{training}").click()
    wait_for(
        lambda: market.challenge(training).status == ChallengeStatus.EXPIRED,
        timeout_s=30,
        what="the training claim to expire",
    )
    for cid, status in ((censorship, "upheld"), (training, "expired")):
        wait_for(
            lambda cid=cid, status=status: status in tid(page, f"challenge-status-{cid}").inner_text().lower(),
            timeout_s=30,
            what=f"challenge {cid} to show {status}",
        )
    assert market.round(task_id, 0).status == RoundStatus.INVALIDATED
    assert market.task(task_id).open_challenges == 0
    assert page_errors == []


def test_seal_button_seals_a_finished_run(stack: Stack, new_page: Any, page_errors: PageErrors) -> None:
    """Once the last round's challenge window has passed, the sponsor seals from the run page."""
    page, market, w3 = new_page, stack.market, stack.w3
    signers = [from_private_key(k) for k in stack.keys]
    sponsor, trainers, witnesses = signers[0], signers[1:4], signers[4:7]
    spec = build_spec(
        witnesses=tuple(w.address for w in witnesses),
        enrollment_deadline=chain_time(w3) + 3600,
        name="sealing",
        rounds=1,
    )
    task_id, _ = start_task(market, sponsor, spec, witnesses, trainers)
    for fragment, trainer in enumerate(trainers):
        commit(market, trainer, task_id, 0, fragment)
    travel_past(w3, market.round_deadline(task_id))
    for w in witnesses[:2]:
        market.finalize_round(w, task_id, 0, h32("sealing/state"), h32("sealing/aggregate"), 0b111)
    assert market.task(task_id).status == TaskStatus.AWAITING_SEAL

    page.goto(f"{stack.url}/#/runs/{task_id}")
    page.select_option('[data-testid="account-select"]', sponsor.address.lower())
    tid(page, "seal-wait").wait_for()  # the challenge window is still open: no button yet
    assert tid(page, "seal-button").count() == 0
    travel_past(w3, market.task(task_id).last_closed_at + spec.challenge_window_s)
    tid(page, "seal-button").click(timeout=30_000)
    wait_for(lambda: market.task(task_id).status == TaskStatus.SEALED, timeout_s=30, what="the run to seal")
    wait_for(
        lambda: "sealed" in tid(page, "run-status").inner_text().lower(), timeout_s=30, what="the page to show sealed"
    )
    assert market.credit_of(trainers[0].address) > 0  # seal paid the trainers
    assert page_errors == []
