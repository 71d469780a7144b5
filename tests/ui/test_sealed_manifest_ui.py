"""The run page of a Confidential task in Chromium, against the sponsor's own API server (holding its
data-key store) on the session's anvil: the card shows the sealed manifest the chain names, and the
sponsor's "Install sealed manifest" button has the wallet sign the build authorisation (EIP-191
text, anvil's personal_sign: the server refuses an unsigned build), builds the next version through
the API and sends it from the wallet (anvil's unlocked account #0, the sponsor, whose store is
bound to it); a server without the store shows the
API's one-line refusal. Another account sees no button."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.conftest import SHARD_COUNT as SHARDS
from api.conftest import VOCAB_SIZE as VOCAB
from api.conftest import publish_tiny_task
from syncline.api.server import ApiServer, ApiSettings
from syncline.api.settings import SEALING_KEYS_ENV
from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.chain.toolchain import compile_contracts
from syncline.confidential.attestation import DevnetAttestationService, deploy_devnet_verifier, measurement_digest
from syncline.confidential.keystore import EnclaveKey, StoreBinding, new_enclave_key, write_data_keys
from syncline.confidential.sponsor import SealingRequest
from syncline.protocol.hashing import keccak
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import cached_corpus

from .conftest import FRONTEND_DIST, PageErrors

pytestmark = [pytest.mark.chain, pytest.mark.slow]

IMAGE = measurement_digest(b"syncline-ui-sealed-test-image".ljust(48, b"\0"))
PASSWORD = "the sponsor's sealing password"


@pytest.fixture(scope="module")
def state_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-sealed-state")
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, root / "artifacts" / cache.name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYNCLINE_STATE_DIR", str(root))
        cached_corpus(SHARDS, VOCAB)
    return root


@pytest.fixture(scope="module")
def blob_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path_factory.mktemp("ui-sealed-blobs")), host="127.0.0.1", port=0)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def admit(market: MarketClient, service: DevnetAttestationService, task_id: int, trainer: Signer) -> EnclaveKey:
    key = new_enclave_key()
    market.enroll_attested(trainer, task_id, key.pubkey, IMAGE, service.issue(key.pubkey, IMAGE, trainer.address))
    return key


def test_sponsor_installs_sealed_manifest_versions_from_the_run_page(
    state_root: Path,
    blob_service: BlobService,
    deployment: Deployment,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    browser: Any,
    page_errors: PageErrors,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(state_root))
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", PASSWORD)
    w3 = market.w3
    blobs = HttpBlobStore(blob_service.url)
    service_key = "0x" + keccak(b"ui sealed-manifest test service").hex()
    address = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier="0x" + "11" * 20).address
    service = DevnetAttestationService(
        service_key, chain_id=w3.eth.chain_id, verifier=deploy_devnet_verifier(w3, sponsor, address)
    )
    published = publish_tiny_task(
        blobs,
        w3,
        witnesses,
        name="ui-sealed-run",
        enrollment_deadline=chain_time(w3) + 3600,
        seal=SealingRequest(service.verifier, ("0x" + IMAGE.hex(),)),
    )
    assert published.sealed is not None
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    market.configure_confidential(sponsor, task_id, service.verifier, [IMAGE])
    keys_dir = tmp_path / "sealing"
    binding = StoreBinding.of(sponsor.address, service.verifier, ["0x" + IMAGE.hex()])
    write_data_keys(keys_dir / f"{published.spec.spec_hash[2:]}.json", published.sealed, PASSWORD, binding=binding)
    first = admit(market, service, task_id, trainers[0])

    settings = ApiSettings(
        deployment=Path(deployment.abi_path).with_name("deployment.json"),
        blob_store=blob_service.url,
        db_url=f"sqlite:///{tmp_path / 'index.db'}",
        port=0,
        frontend_dir=FRONTEND_DIST,
        poll_interval_s=0.3,
        state_dir=state_root,
    )
    monkeypatch.setenv(SEALING_KEYS_ENV, str(keys_dir))
    with ApiServer(settings) as server:
        server.wait_indexed()
        context = browser.new_context(viewport={"width": 1280, "height": 800}, timezone_id="UTC", locale="en-GB")
        page = context.new_page()
        page.set_default_timeout(30_000)
        page_errors.attach(page)
        page.goto(f"{server.url}/#/runs/{task_id}")
        card = page.get_by_test_id("sealed-card")
        card.wait_for()
        version = page.get_by_test_id("sealed-version")
        assert version.inner_text() == "0"
        assert "No sealed manifest is installed yet" in page.get_by_test_id("sealed-note").inner_text()

        def install(expected: int) -> None:
            page.get_by_test_id("sealed-install").click()
            page.locator('[data-testid="sealed-tx"][data-state="done"]').wait_for()
            assert f"version {expected} installed" in page.get_by_test_id("sealed-tx").inner_text()
            page.wait_for_function(
                "v => document.querySelector('[data-testid=sealed-version]')?.textContent === v", arg=str(expected)
            )

        install(1)
        card.screenshot(path="/tmp/sealed_card.png")
        h, _, onchain = market.get_sealed_manifest(task_id)
        assert onchain == 1 and page.get_by_test_id("sealed-envelopes").inner_text() == str(SHARDS)
        assert page.get_by_test_id("sealed-hash").get_attribute("title") == "0x" + h.hex()
        corpus = cached_corpus(SHARDS, VOCAB)
        assert TaskContext.load(market, blobs, task_id, enclave=first).shard(0) == corpus.shards[0]

        late = admit(market, service, task_id, trainers[1])
        server.wait_indexed()
        install(2)
        assert market.get_sealed_manifest(task_id)[2] == 2
        assert page.get_by_test_id("sealed-envelopes").inner_text() == str(2 * SHARDS)
        assert page.get_by_test_id("sealed-enclaves").inner_text() == "2"
        assert TaskContext.load(market, blobs, task_id, enclave=late).shard(2) == corpus.shards[2]

        # nothing new: no transaction, a note
        page.get_by_test_id("sealed-install").click()
        assert "Nothing to install" in page.get_by_test_id("sealed-nothing").inner_text()
        assert market.get_sealed_manifest(task_id)[2] == 2

        # a server without the sponsor's store: the API's one line, nothing sent
        monkeypatch.delenv(SEALING_KEYS_ENV)
        page.get_by_test_id("sealed-install").click()
        assert "holds no sponsor data-key store" in page.get_by_test_id("error").inner_text()
        assert page.get_by_test_id("sealed-result").inner_text() == ""
        assert page.get_by_test_id("sealed-install").is_enabled()
        assert market.get_sealed_manifest(task_id)[2] == 2

        # another account (anvil #1) sees the manifest but no install button
        chain_id = w3.eth.chain_id
        page.evaluate(f"localStorage.setItem('syncline.account.{chain_id}', '{trainers[0].address.lower()}')")
        page.reload()
        page.get_by_test_id("sealed-sponsor-only").wait_for()
        card.screenshot(path="/tmp/sealed_card2.png")
        assert page.get_by_test_id("sealed-install").count() == 0
        assert page.get_by_test_id("sealed-version").inner_text() == "2"
        context.close()
    refused = [e for e in page_errors if "status of 503 (Service Unavailable)" in e]
    assert len(refused) == 1 and [e for e in page_errors if e not in refused] == [], page_errors
