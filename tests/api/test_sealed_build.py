"""``POST /api/runs/{id}/sealed-manifest/build`` on a real anvil, blob service and API server: the
sponsor's own server, holding its data-key store, builds the next sealed-manifest version for the
enclaves the chain admitted, and the sponsor's key signs and sends the returned call exactly as a
browser wallet would (a raw transaction of ``{to, data, value}``). Every refusal is one line."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_account.messages import encode_defunct
from web3 import Web3
from web3.exceptions import ContractCustomError

from conftest import travel_past
from syncline.api import ApiServer, ApiSettings
from syncline.api.settings import SEALING_KEYS_ENV
from syncline.blobstore import HttpBlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.confidential.attestation import DevnetAttestationService, deploy_devnet_verifier, measurement_digest
from syncline.confidential.authorise import build_message
from syncline.confidential.keystore import EnclaveKey, StoreBinding, new_enclave_key, write_data_keys
from syncline.confidential.manifest import SealedDatasetManifest, seal_dataset
from syncline.confidential.sponsor import BuildRefused, SealingRequest, bind_keys_to_task, build_manifest
from syncline.protocol.hashing import keccak
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import PublishedTask, cached_corpus

from .conftest import SHARD_COUNT, VOCAB_SIZE, Http, assert_error, publish_tiny_task

pytestmark = pytest.mark.chain

IMAGE = measurement_digest(b"syncline-api-sealed-test-image".ljust(48, b"\0"))
PASSWORD = "sponsor's own secret"


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sealing")


@pytest.fixture(scope="module")
def sealing_server(
    api_settings: ApiSettings, tmp_path_factory: pytest.TempPathFactory, api_server: ApiServer
) -> Iterator[ApiServer]:
    """A second server on the same chain and blob service: the sponsor's own, whose data-key store
    comes from ``$SYNCLINE_SEALING_KEYS`` at request time (each test sets it)."""
    work = tmp_path_factory.mktemp("sealing-api")
    settings = dataclasses.replace(
        api_settings, db_url=f"sqlite:///{work / 'index.db'}", sealing_keys=None, seal_builds_per_minute=1_000
    )
    with ApiServer(settings) as server:
        yield server


@pytest.fixture
def sponsor_http(
    sealing_server: ApiServer, chain_snapshot: str, keys_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Http:
    sealing_server.wait_indexed()
    monkeypatch.setenv(SEALING_KEYS_ENV, str(keys_dir))
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", PASSWORD)
    return Http(sealing_server.url)


@dataclasses.dataclass
class Sealed:
    task_id: int
    published: PublishedTask
    service: DevnetAttestationService
    keys_file: Path


def post_sealed_task(
    market: MarketClient, sponsor: Signer, witnesses: list[Signer], blobs: HttpBlobStore, keys_dir: Path
) -> Sealed:
    """A Confidential task (devnet verifier, one allowed measurement) posted with its policy; the
    sponsor's data keys in ``keys_dir/<spec hash>.json``, as ``post-task`` lays them out."""
    w3 = market.w3
    service_key = "0x" + keccak(b"api sealed-manifest build test service").hex()
    address = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier="0x" + "11" * 20).address
    verifier = deploy_devnet_verifier(w3, sponsor, address)
    service = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier=verifier)
    published = publish_tiny_task(
        blobs, w3, witnesses, name="api-sealed-task", seal=SealingRequest(verifier, ("0x" + IMAGE.hex(),))
    )
    assert published.sealed is not None and published.spec.confidential is not None
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    market.configure_confidential(sponsor, task_id, verifier, [IMAGE])
    binding = StoreBinding.of(sponsor.address, verifier, ["0x" + IMAGE.hex()])
    path = keys_dir / f"{published.spec.spec_hash[2:]}.json"
    keys_file = write_data_keys(path, published.sealed, PASSWORD, binding=binding)
    return Sealed(task_id, published, service, keys_file)


def admit_trainer(market: MarketClient, sealed: Sealed, trainer: Signer) -> EnclaveKey:
    key = new_enclave_key()
    report = sealed.service.issue(key.pubkey, IMAGE, trainer.address)
    market.enroll_attested(trainer, sealed.task_id, key.pubkey, IMAGE, report)
    return key


def admit_witness(market: MarketClient, sealed: Sealed, witness: Signer) -> EnclaveKey:
    key = new_enclave_key()
    market.ensure_witness_bonded(witness, sealed.task_id)
    report = sealed.service.issue(key.pubkey, IMAGE, witness.address)
    market.register_witness_enclave(witness, sealed.task_id, key.pubkey, IMAGE, report)
    return key


def wallet_send(w3: Web3, signer: Signer, call: dict[str, Any]) -> Any:
    """What the browser wallet does with a built call: sign ``{to, data, value}`` and send it."""
    tx = {
        "from": signer.address,
        "to": Web3.to_checksum_address(call["to"]),
        "data": call["data"],
        "value": int(call["value_wei"]),
        "nonce": w3.eth.get_transaction_count(signer.address),  # type: ignore[arg-type]
        "chainId": w3.eth.chain_id,
        "gasPrice": w3.eth.gas_price,
    }
    tx["gas"] = w3.eth.estimate_gas(tx)  # type: ignore[arg-type]
    signed = signer.account.sign_transaction(tx)
    return w3.eth.wait_for_transaction_receipt(w3.eth.send_raw_transaction(signed.raw_transaction))


def test_the_build_message_is_the_one_the_ui_signs() -> None:
    """The domain string: chain id, market, task, version, expiry (frontend/src/pages/sealed.ts builds the same)."""
    text = build_message(31337, "0xABCDEF0000000000000000000000000000000001", 7, 2, 1_800_000_000)
    assert text == (
        "Syncline: build the sealed manifest of a Confidential task\n"
        "chain id: 31337\n"
        "market: 0xabcdef0000000000000000000000000000000001\n"
        "task: 7\n"
        "version: 2\n"
        "expires: 1800000000"
    )
    ui = (Path(__file__).parents[2] / "frontend" / "src" / "pages" / "sealed.ts").read_text()
    assert "Syncline: build the sealed manifest of a Confidential task" in ui


def signed_body(
    market: MarketClient, signer: Signer, task_id: int, *, version: int | None = None, expires: int | None = None
) -> dict[str, Any]:
    """``{version, expires, signature}``: ``signer`` authorises building the task's next version."""
    version = market.get_sealed_manifest(task_id)[2] + 1 if version is None else version
    expires = int(time.time()) + 300 if expires is None else expires
    text = build_message(market.w3.eth.chain_id, market.address, task_id, version, expires)
    signature = signer.account.sign_message(encode_defunct(text=text)).signature
    return {"version": version, "expires": expires, "signature": "0x" + bytes(signature).hex()}


def build(http: Http, task_id: int, market: MarketClient, signer: Signer) -> dict[str, Any]:
    reply = http.post(f"/api/runs/{task_id}/sealed-manifest/build", signed_body(market, signer, task_id))
    assert reply.status == 200, reply.body
    return dict(reply.json())


def test_build_returns_the_call_the_sponsor_wallet_sends(
    sponsor_http: Http,
    sealing_server: ApiServer,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    blobs: HttpBlobStore,
    keys_dir: Path,
) -> None:
    http, w3 = sponsor_http, market.w3
    sealed = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir)
    task_id, spec = sealed.task_id, sealed.published.spec
    first = admit_trainer(market, sealed, trainers[0])
    witness = admit_witness(market, sealed, witnesses[0])
    sealing_server.wait_indexed()
    assert http.ok(f"/api/runs/{task_id}/sealed-manifest")["version"] == 0

    v1 = build(http, task_id, market, sponsor)
    shards = SHARD_COUNT
    assert v1["version"] == 1 and v1["current_version"] == 0 and v1["sponsor"] == sponsor.address.lower()
    assert v1["added"] == shards + (shards + 1) and v1["enclaves"] == 2 and v1["envelopes"] == 2 * shards + 1
    call = v1["call"]
    assert call["function"] == "installSealedManifest" and call["to"] == market.address.lower()
    assert call["args"] == [task_id, v1["manifest_hash"], v1["uri"]] and call["value_wei"] == "0"
    expected = market.encode_call("installSealedManifest", [task_id, bytes.fromhex(v1["manifest_hash"][2:]), v1["uri"]])
    assert call["data"] == "0x" + expected.hex()
    # published, content-addressed; nothing on chain until the sponsor signs
    m1 = SealedDatasetManifest.parse(blobs.get(v1["manifest_hash"]))
    assert m1.manifest_hash == v1["manifest_hash"] and market.get_sealed_manifest(task_id)[2] == 0
    # only the sponsor can install it: the same call from a trainer reverts
    with pytest.raises(ContractCustomError) as refused:
        w3.eth.call({"from": trainers[0].address, "to": Web3.to_checksum_address(call["to"]), "data": call["data"]})  # type: ignore[typeddict-item]
    decoded = market.decoder.decode(refused.value.data if isinstance(refused.value.data, str) else None)
    assert decoded is not None and decoded[0] == "SynclineNotSponsor", decoded
    assert wallet_send(w3, sponsor, call)["status"] == 1
    h, uri, version = market.get_sealed_manifest(task_id)
    assert (version, "0x" + h.hex(), uri) == (1, v1["manifest_hash"], v1["uri"])
    corpus = cached_corpus(SHARD_COUNT, VOCAB_SIZE)
    assert TaskContext.load(market, blobs, task_id, enclave=first).shard(1) == corpus.shards[1]
    assert TaskContext.load(market, blobs, task_id, enclave=witness).validation_shard() == corpus.validation

    # a late enrollee: version 2 adds its envelopes, same ciphertexts
    late = admit_trainer(market, sealed, trainers[1])
    v2 = build(http, task_id, market, sponsor)
    assert (v2["version"], v2["current_version"], v2["added"], v2["enclaves"]) == (2, 1, shards, 3)
    assert http.ok(f"/api/runs/{task_id}/sealed-manifest")["version"] == 1  # built, not installed
    assert wallet_send(w3, sponsor, v2["call"])["status"] == 1
    assert market.get_sealed_manifest(task_id)[2] == 2
    m2 = SealedDatasetManifest.parse(blobs.get(v2["manifest_hash"]))
    assert m2.shards == m1.shards and m2.validation == m1.validation  # nothing re-encrypted
    assert ["0x" + s.ciphertext_hash.hex() for s in m2.shards] == list(spec.dataset.shard_hashes)
    assert set(m1.envelopes) <= set(m2.envelopes)
    new = [e for e in m2.envelopes if e not in m1.envelopes]
    assert len(new) == shards and {e.enclave_pubkey for e in new} == {late.pubkey}
    assert TaskContext.load(market, blobs, task_id, enclave=late).shard(2) == corpus.shards[2]

    got = http.ok(f"/api/runs/{task_id}/sealed-manifest")
    assert got["version"] == 2 and got["manifest_hash"] == v2["manifest_hash"] and got["envelopes"] == 3 * shards + 1
    assert "0x" + late.pubkey.hex() in got["enclaves"]

    # nothing new: 200, added 0, no call, the installed version
    again = build(http, task_id, market, sponsor)
    assert again["call"] is None and again["added"] == 0
    assert (again["version"], again["current_version"], again["manifest_hash"]) == (2, 2, v2["manifest_hash"])


def test_build_refusals_are_one_line(
    sponsor_http: Http,
    sealing_server: ApiServer,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    blobs: HttpBlobStore,
    keys_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    http, w3 = sponsor_http, market.w3
    sealed = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir)
    task_id = sealed.task_id
    admit_trainer(market, sealed, trainers[0])
    plain = publish_tiny_task(blobs, w3, witnesses)
    plain_id, _ = market.post_task(sponsor, plain.spec, plain.spec_uri)
    sealing_server.wait_indexed()
    path = f"/api/runs/{task_id}/sealed-manifest/build"

    def signed() -> dict[str, Any]:
        return signed_body(market, sponsor, task_id)

    assert_error(http.post("/api/runs/999/sealed-manifest/build"), 404, "unknown task id 999")
    assert_error(http.post(f"/api/runs/{2**70}/sealed-manifest/build"), 404, "unknown task id")
    assert_error(http.post(f"/api/runs/{plain_id}/sealed-manifest/build"), 404, "is not a Confidential task")
    assert_error(http.get(path), 405)
    assert_error(http.post(path, raw=b"x" * (65 << 10)), 413)

    # the password: only from the server's environment, never named in the answer
    monkeypatch.delenv("SYNCLINE_SEALING_PASSWORD")
    msg = assert_error(http.post(path, signed()), 503, "needs a password: set $SYNCLINE_SEALING_PASSWORD")
    assert str(keys_dir) not in msg
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", "not it")
    msg = assert_error(http.post(path, signed()), 503, "wrong password")
    assert str(keys_dir) not in msg and "not it" not in msg
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", PASSWORD)
    # the password is read per build, from the environment
    assert build(http, task_id, market, sponsor)["call"] is not None
    logged = capfd.readouterr()
    assert logged.out.count("api.sealed_manifest_built") == 1 and "api.upstream_error" in logged.out
    assert PASSWORD not in logged.out + logged.err and "not it" not in logged.out + logged.err

    # no store configured, a path that is not there, a directory without this task's store
    monkeypatch.delenv(SEALING_KEYS_ENV)
    assert_error(http.post(path, signed()), 503, "holds no sponsor data-key store")
    monkeypatch.setenv(SEALING_KEYS_ENV, str(tmp_path / "nowhere"))
    assert_error(http.post(path, signed()), 503, "names no data-key store")
    monkeypatch.setenv(SEALING_KEYS_ENV, str(tmp_path))
    assert_error(http.post(path, signed()), 409, f"no data-key store for task {task_id}")
    # a store of another dataset (a single-file configuration)
    other = seal_dataset([b"another sponsor's shard" * 4], b"another validation shard")
    monkeypatch.setenv(SEALING_KEYS_ENV, str(write_data_keys(tmp_path / "other.json", other, PASSWORD)))
    msg = assert_error(
        http.post(path, signed()), 409, f"holds the keys of dataset 0x{other.dataset_id.hex()}, not task {task_id}'s"
    )
    assert str(tmp_path) not in msg
    # a store written unbound (before stores were bound): refused until the sponsor binds it
    unbound = write_data_keys(tmp_path / "unbound.json", sealed.published.sealed, PASSWORD)
    monkeypatch.setenv(SEALING_KEYS_ENV, str(unbound))
    assert_error(http.post(path, signed()), 409, "bound to no sponsor")
    with pytest.raises(BuildRefused, match="is not task"):  # only the sponsor's key binds it
        bind_keys_to_task(market, blobs, task_id, unbound, trainers[0].address, password=PASSWORD)
    binding = bind_keys_to_task(market, blobs, task_id, unbound, sponsor.address, password=PASSWORD)
    assert binding.sponsor == sponsor.address.lower()
    assert build(http, task_id, market, sponsor)["call"] is not None
    # the right store as a single file works, and nothing was installed by any refusal
    monkeypatch.setenv(SEALING_KEYS_ENV, str(sealed.keys_file))
    assert build(http, task_id, market, sponsor)["call"] is not None and market.get_sealed_manifest(task_id)[2] == 0

    # a cancelled task's manifest can no longer change
    travel_past(w3, int(sealed.published.spec.enrollment_deadline))
    market.cancel_underfilled(sponsor, task_id)
    sealing_server.wait_indexed()
    assert_error(http.post(path, signed()), 409, f"task {task_id} is cancelled")


def test_build_on_a_server_without_a_store_and_its_rate_limit(
    http: Http,
    api: ApiServer,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    blobs: HttpBlobStore,
    keys_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The package's server has no data-key store (the default): 503 to the sponsor, counted by
    ``seal_builds_per_minute`` (4 per client per minute), then 429. Only authorised builds count:
    the limit's own 404s and the unsigned, expired or foreign requests it refuses do not."""
    monkeypatch.delenv(SEALING_KEYS_ENV, raising=False)
    sealed = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir)
    plain = publish_tiny_task(blobs, market.w3, witnesses)
    plain_id, _ = market.post_task(sponsor, plain.spec, plain.spec_uri)
    api.wait_indexed()
    path = f"/api/runs/{sealed.task_id}/sealed-manifest/build"
    limit = api.settings.seal_builds_per_minute
    for _ in range(2 * limit):
        body = signed_body(market, sponsor, sealed.task_id)
        assert_error(http.post("/api/runs/999/sealed-manifest/build", body), 404, "unknown task id 999")
        plain_path = f"/api/runs/{plain_id}/sealed-manifest/build"
        assert_error(http.post(plain_path, signed_body(market, sponsor, plain_id)), 404, "not a Confidential task")
        assert_error(http.post(path, {}), 422, "required field missing")
        assert_error(http.post(path), 401, "must be signed by the task's sponsor")
        assert_error(http.post(path, signed_body(market, trainers[0], sealed.task_id)), 403, "not by task")
    for _ in range(limit):
        assert_error(http.post(path, signed_body(market, sponsor, sealed.task_id)), 503, f"set ${SEALING_KEYS_ENV}")
    reply = http.post(path, signed_body(market, sponsor, sealed.task_id))
    assert_error(reply, 429, f"at most {limit} sealed-manifest builds per minute per client")
    assert market.get_sealed_manifest(sealed.task_id)[2] == 0


def test_a_build_is_signed_by_the_sponsor_for_this_task_version_and_time(
    sponsor_http: Http,
    sealing_server: ApiServer,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    blobs: HttpBlobStore,
    keys_dir: Path,
) -> None:
    """Unsigned, expired, too far ahead, malformed, another signer, another task's or version's
    signature: one-line refusals, nothing built; the sponsor's current signature builds."""
    http, now = sponsor_http, int(time.time())
    sealed = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir)
    task_id = sealed.task_id
    admit_trainer(market, sealed, trainers[0])
    sealing_server.wait_indexed()
    path = f"/api/runs/{task_id}/sealed-manifest/build"
    assert_error(http.post(path), 401, "must be signed by the task's sponsor")
    assert_error(http.post(path, {}), 422, "required field missing")
    expired = signed_body(market, sponsor, task_id, expires=now - 1)
    assert_error(http.post(path, expired), 401, "expired")
    assert_error(http.post(path, signed_body(market, sponsor, task_id, expires=now + 3600)), 401, "more than 600 s")
    assert_error(http.post(path, {**signed_body(market, sponsor, task_id), "signature": "0x1234"}), 401, "65 bytes")
    zero = {**signed_body(market, sponsor, task_id), "signature": "0x" + "00" * 65}
    assert_error(http.post(path, zero), 401, "not a valid secp256k1 signature")
    msg = assert_error(http.post(path, signed_body(market, trainers[0], task_id)), 403, "not by task")
    assert trainers[0].address.lower() in msg and sponsor.address.lower() in msg
    other = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir).task_id
    assert_error(http.post(path, signed_body(market, sponsor, other)), 403, "not by task")  # another task's
    assert_error(http.post(path, signed_body(market, sponsor, task_id, version=2)), 409, "next version is 1")
    assert market.get_sealed_manifest(task_id)[2] == 0
    reply = http.post(path, signed_body(market, sponsor, task_id))
    assert reply.status == 200 and reply.json()["version"] == 1 and reply.json()["added"] == SHARD_COUNT
    # a browser page elsewhere cannot make the sponsor's browser ask (OriginGuard, every POST)
    raw = json.dumps(signed_body(market, sponsor, task_id)).encode()
    assert_error(Http(sealing_server.url).request("POST", path, raw=raw, content_type="text/plain"), 403, "Origin")


def test_an_outsider_reposting_the_spec_gets_no_data_keys(
    sponsor_http: Http,
    sealing_server: ApiServer,
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    blobs: HttpBlobStore,
    keys_dir: Path,
) -> None:
    """The victim's exact spec (same hash), re-posted by an outsider with its own verifier and
    enclave, signed by the outsider for its own task: the victim's server wraps nothing to it."""
    w3 = market.w3
    victim = post_sealed_task(market, sponsor, witnesses, blobs, keys_dir)
    spec = victim.published.spec
    assert spec.confidential is not None
    # the outsider's own attestation service and verifier, admitting its own image
    service_key = "0x" + keccak(b"the outsider's own attestation service").hex()
    address = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier="0x" + "11" * 20).address
    verifier = deploy_devnet_verifier(w3, outsider, address)
    service = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier=verifier)
    own_image = measurement_digest(b"the outsider's own enclave image".ljust(48, b"\0"))
    task_id, _ = market.post_task(outsider, spec, victim.published.spec_uri)
    assert "0x" + bytes(market.spec_tuple(task_id)[0]).hex() == spec.spec_hash  # the same spec hash
    market.configure_confidential(outsider, task_id, verifier, [own_image])
    enclave = new_enclave_key()
    report = service.issue(enclave.pubkey, own_image, trainers[2].address)
    market.enroll_attested(trainers[2], task_id, enclave.pubkey, own_image, report)
    sealing_server.wait_indexed()

    reply = sponsor_http.post(f"/api/runs/{task_id}/sealed-manifest/build", signed_body(market, outsider, task_id))
    assert_error(reply, 403, f"task {task_id}'s attestation policy on chain is not its spec's")
    assert market.get_sealed_manifest(task_id)[2] == 0

    # the same with the spec's own policy (the victim's verifier and measurements): not its store
    copy, _ = market.post_task(outsider, spec, victim.published.spec_uri)
    market.configure_confidential(outsider, copy, spec.confidential.verifier, [IMAGE])
    sealing_server.wait_indexed()
    reply = sponsor_http.post(f"/api/runs/{copy}/sealed-manifest/build", signed_body(market, outsider, copy))
    msg = assert_error(reply, 403, "the data-key store belongs to sponsor")
    assert sponsor.address.lower() in msg and outsider.address.lower() in msg and str(keys_dir) not in msg
    assert market.get_sealed_manifest(copy)[2] == 0
    # nor through the CLI's build step, with the outsider's own key
    for task in (task_id, copy):
        with pytest.raises(BuildRefused):
            build_manifest(market, blobs, task, victim.keys_file, caller=outsider.address, password=PASSWORD)
