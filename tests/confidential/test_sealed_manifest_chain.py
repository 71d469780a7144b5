"""The sealed manifest through the market and the command line, on a real anvil and blob service:
a sealed language task's shards open only inside admitted enclaves (through ``TaskContext``, as the
agents read them), and a late enrollee gets envelopes without any shard being re-encrypted."""

from __future__ import annotations

import dataclasses
import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from syncline.blobstore import BlobService, HttpBlobStore, LocalBlobStore
from syncline.chain.deployment import Deployment
from syncline.chain.devnet import Devnet, chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.chain.toolchain import compile_contracts
from syncline.confidential.attestation import DevnetAttestationService, deploy_devnet_verifier, measurement_digest
from syncline.confidential.enclave import SealedShardUnavailable, check_task_policy
from syncline.confidential.keystore import EnclaveKey, load_data_keys, new_enclave_key, write_data_keys
from syncline.confidential.manifest import SealedDatasetManifest
from syncline.confidential.sponsor import SealingRequest
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.demo.training_run import DemoPlan
from syncline.errors import SpecError
from syncline.protocol.hashing import keccak
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import cached_corpus, publish_language_task
from syncline.sponsor.task_defaults import default_task

pytestmark = pytest.mark.chain

IMAGE = measurement_digest(b"syncline-trainer-image-v1".ljust(48, b"\0"))
PLAN = DemoPlan(shard_count=6, vocab_size=512, seq_len=32, model=dict(TINY_MODEL), trainers=3)


@pytest.fixture(scope="module")
def state_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's state dir: the compiled contracts copied in; the tiny corpus is built once."""
    root = tmp_path_factory.mktemp("state")
    cache = next(iter(compile_contracts().values())).path.parent
    shutil.copytree(cache, root / "artifacts" / cache.name)
    return root


@pytest.fixture
def state(state_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(state_root))
    monkeypatch.setenv("SYNCLINE_LOG_FORMAT", "console")
    return state_root


@pytest.fixture
def verifier_service(market: MarketClient, sponsor: Signer) -> DevnetAttestationService:
    w3 = market.w3
    service_key = "0x" + keccak(b"sealed manifest test attestation service").hex()
    address = DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier="0x" + "11" * 20).address
    verifier = deploy_devnet_verifier(w3, sponsor, address)
    return DevnetAttestationService(service_key, chain_id=w3.eth.chain_id, verifier=verifier)


@pytest.fixture
def blob_service(tmp_path: Path) -> Iterator[BlobService]:
    service = BlobService(LocalBlobStore(tmp_path / "blobs"), host="127.0.0.1", port=0).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``syncline <argv>`` in-process: (exit code, stdout, stderr); logging restored afterwards."""
    import structlog

    from syncline.cli import main

    saved = structlog.get_config()

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run
    structlog.configure(**saved)


def test_sealed_task_install_get_and_late_enrollee(
    state: Path,
    tmp_path: Path,
    devnet: Devnet,
    market: MarketClient,
    deployment: Deployment,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    blob_service: BlobService,
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
    verifier_service: DevnetAttestationService,
) -> None:
    w3 = market.w3
    service = verifier_service
    verifier = service.verifier
    blobs = HttpBlobStore(blob_service.url)
    template = default_task(PLAN, [w.address for w in witnesses], chain_time(w3))
    published = publish_language_task(
        blobs,
        template=template,
        shard_count=PLAN.shard_count,
        vocab_size=PLAN.vocab_size,
        seq_len=PLAN.seq_len,
        model=PLAN.model,
        seal=SealingRequest(verifier, ("0x" + IMAGE.hex(),)),
    )
    spec, sealed = published.spec, published.sealed
    assert sealed is not None and spec.confidential is not None and spec.tier.name == "CONFIDENTIAL"
    corpus = cached_corpus(PLAN.shard_count, PLAN.vocab_size)
    # only ciphertexts reached the blob service
    stored = b"".join(p.read_bytes() for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    assert all(s[:64] not in stored for s in (*corpus.shards, corpus.validation))
    keys_file = write_data_keys(tmp_path / "sponsor" / "keys.json", sealed, "sponsor secret")
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", "sponsor secret")
    task_id, _ = market.post_task(sponsor, spec, published.spec_uri)
    market.configure_confidential(sponsor, task_id, verifier, [IMAGE])
    # what an agent checks before attesting its enclave to the task: the chain's policy is the spec's
    check_task_policy(market, task_id, spec)
    other = dataclasses.replace(spec.confidential, measurements=("0x" + "ee" * 32,))
    with pytest.raises(SpecError, match="on-chain measurements"):
        check_task_policy(market, task_id, spec.with_updates(confidential=other))

    def admit_trainer(t: Signer) -> EnclaveKey:
        key = new_enclave_key()
        market.enroll_attested(t, task_id, key.pubkey, IMAGE, service.issue(key.pubkey, IMAGE, t.address))
        return key

    first = admit_trainer(trainers[0])
    witness = new_enclave_key()
    market.ensure_witness_bonded(witnesses[0], task_id)
    market.register_witness_enclave(
        witnesses[0], task_id, witness.pubkey, IMAGE, service.issue(witness.pubkey, IMAGE, witnesses[0].address)
    )
    deployment_file = str(Path(deployment.abi_path).with_name("deployment.json"))
    monkeypatch.setenv("SPONSOR_KEY", devnet.private_keys()[0])
    common = ("--task-id", str(task_id), "--deployment", deployment_file, "--blob-store", blob_service.url)
    # a store written unbound: refused until the sponsor binds it to the task's sponsor and policy
    code, out, err = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "SPONSOR_KEY"
    )
    assert code != 0 and out == "" and "bound to no sponsor" in err.strip().splitlines()[-1]
    monkeypatch.setenv("TRAINER_KEY", devnet.private_keys()[1])  # not the sponsor: cannot bind it
    code, out, err = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "TRAINER_KEY", "--bind-keys"
    )
    assert code != 0 and "is not task" in err.strip().splitlines()[-1]
    code, out, err = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "SPONSOR_KEY", "--bind-keys"
    )
    assert code == 0, err
    bound = load_data_keys(keys_file, password="sponsor secret").binding
    assert bound is not None and bound.sponsor == sponsor.address.lower() and bound.verifier == verifier.lower()
    v1 = json.loads(out)
    assert v1["version"] == 1 and v1["added"] == 6 + 7 and v1["enclaves"] == 2  # witness: + validation

    # The agents' data path: TaskContext opens a shard in memory with the enclave key, only then.
    ctx = TaskContext.load(market, blobs, task_id, enclave=first)
    assert ctx.shard(0) == corpus.shards[0] and ctx.shard(5) == corpus.shards[5]
    with pytest.raises(SealedShardUnavailable, match="opens only inside an attested enclave"):
        TaskContext.load(market, blobs, task_id).shard(0)
    assert TaskContext.load(market, blobs, task_id, enclave=witness).validation_shard() == corpus.validation
    with pytest.raises(SealedShardUnavailable, match="no envelope"):
        TaskContext.load(market, blobs, task_id, enclave=first).validation_shard()

    # A late enrollee: no envelope until the sponsor installs version 2, then the same ciphertexts open.
    late = admit_trainer(trainers[1])
    late_ctx = TaskContext.load(market, blobs, task_id, enclave=late)
    with pytest.raises(SealedShardUnavailable, match="no envelope"):
        late_ctx.shard(2)
    code, out, err = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "SPONSOR_KEY"
    )
    assert code == 0, err
    v2 = json.loads(out)
    assert v2["version"] == 2 and v2["added"] == 6 and v2["manifest_hash"] != v1["manifest_hash"]
    assert late_ctx.shard(2) == corpus.shards[2]
    m1 = SealedDatasetManifest.parse(blobs.get(v1["manifest_hash"]))
    m2 = SealedDatasetManifest.parse(blobs.get(v2["manifest_hash"]))
    assert m1.shards == m2.shards and m1.validation == m2.validation  # nothing re-encrypted
    assert set(m1.envelopes) <= set(m2.envelopes)
    assert ["0x" + s.ciphertext_hash.hex() for s in m2.shards] == list(spec.dataset.shard_hashes)
    # nothing new: no transaction, same version
    code, out, _ = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "SPONSOR_KEY"
    )
    assert code == 0 and json.loads(out)["version"] == 2 and json.loads(out)["added"] == 0

    code, out, err = cli("train", "get-sealed-manifest", *common)
    assert code == 0, err
    got = json.loads(out)
    assert got["version"] == 2 and got["manifest_hash"] == v2["manifest_hash"] and got["shards"] == 6
    assert set(got["enclaves"]) == {"0x" + k.pubkey.hex() for k in (first, witness, late)}
    assert got["envelopes"] == 6 * 3 + 1

    # the sponsor API serves the same manifest, and answers a non-Confidential task with one line
    from syncline.api.server import ApiServer, ApiSettings

    settings = ApiSettings(
        deployment=Path(deployment_file),
        blob_store=blob_service.url,
        db_url=f"sqlite:///{tmp_path / 'index.db'}",
        port=0,
        poll_interval_s=0.1,
        frontend_dir=tmp_path / "no-frontend",
        state_dir=state,
    )
    with ApiServer(settings) as api:
        api.wait_indexed()
        with urllib.request.urlopen(f"{api.url}/api/runs/{task_id}/sealed-manifest", timeout=30) as resp:
            served = json.loads(resp.read())
        assert served["version"] == 2 and served["manifest_hash"] == v2["manifest_hash"]
        assert served["manifest"] == m2.to_mapping() and served["envelopes"] == 19
        plain = spec.with_updates(tier=spec.tier.VERIFIED, confidential=None)
        plain_id, _ = market.post_task(sponsor, plain, blobs.put(plain.canonical_bytes()).uri)
        api.wait_indexed()
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{api.url}/api/runs/{plain_id}/sealed-manifest", timeout=30)
        assert info.value.code == 404
        assert json.loads(info.value.read())["error"] == f"task {plain_id} is not a Confidential task with sealed data"

    # the wrong password for the sponsor's key store: one line, nothing installed
    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", "wrong")
    code, _, err = cli(
        "train", "install-sealed-manifest", *common, "--keys", str(keys_file), "--key-env", "SPONSOR_KEY"
    )
    assert code == 2 and "wrong password" in err.strip().splitlines()[-1]
    assert market.get_sealed_manifest(task_id)[2] == 2


def test_post_task_seals_a_dataset_source_and_configures_the_policy(
    state: Path,
    tmp_path: Path,
    devnet: Devnet,
    market: MarketClient,
    deployment: Deployment,
    trainers: list[Signer],
    witnesses: list[Signer],
    blob_service: BlobService,
    verifier_service: DevnetAttestationService,
    cli: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``syncline train post-task`` with a ``confidential`` section: the shards are published only
    sealed, the data keys land encrypted in the state dir, the policy is on chain before anyone
    enrolls; without the sealing password nothing is uploaded."""
    raw = yaml.safe_load((Path(__file__).parents[2] / "examples" / "task.yaml").read_text())
    raw.update(
        tier="confidential",
        witnesses=[w.address for w in witnesses],
        model={"family": "llama", **{k: v for k, v in TINY_MODEL.items() if k != "family"}},
        dataset_source={"corpus": "shakespeare", "shard_count": 6, "vocab_size": 512, "seq_len": 32},
        confidential={"verifier": verifier_service.verifier, "measurements": ["0x" + IMAGE.hex()]},
    )
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(raw))
    deployment_file = str(Path(deployment.abi_path).with_name("deployment.json"))
    monkeypatch.setenv("SPONSOR_KEY", devnet.private_keys()[0])
    argv = ("train", "post-task", "--spec", str(path), "--deployment", deployment_file)
    argv += ("--blob-store", blob_service.url, "--key-env", "SPONSOR_KEY")
    monkeypatch.delenv("SYNCLINE_SEALING_PASSWORD", raising=False)
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and "SYNCLINE_SEALING_PASSWORD" in err.strip().splitlines()[-1]
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]

    monkeypatch.setenv("SYNCLINE_SEALING_PASSWORD", "sponsor secret")
    code, out, err = cli(*argv)
    assert code == 0, err
    posted = json.loads(out)
    task_id, spec_hash = posted["task_id"], posted["spec_hash"]
    assert market.get_confidential_config(task_id) == (verifier_service.verifier, [IMAGE])
    keys = load_data_keys(state / "sealing" / f"{spec_hash[2:]}.json", password="sponsor secret")
    assert len(keys.keys) == 6 + 1 and len(keys.shards) == 6
    # bound where it is written: this sponsor, the spec's policy (a build for anyone else's task refuses)
    assert keys.binding is not None and keys.binding.sponsor == market.task(task_id).sponsor.lower()
    assert keys.binding.policy() == (verifier_service.verifier.lower(), ("0x" + IMAGE.hex(),))
    corpus = cached_corpus(6, 512)
    stored = b"".join(p.read_bytes() for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    assert all(s[:64] not in stored and s[-64:] not in stored for s in (*corpus.shards, corpus.validation))
    # an attested trainer gets in; the enclave opens the sealed shard once the manifest names it
    key = new_enclave_key()
    t = trainers[0]
    market.enroll_attested(t, task_id, key.pubkey, IMAGE, verifier_service.issue(key.pubkey, IMAGE, t.address))
    common = ("--task-id", str(task_id), "--deployment", deployment_file, "--blob-store", blob_service.url)
    code, out, err = cli("train", "install-sealed-manifest", *common, "--key-env", "SPONSOR_KEY")  # default --keys
    assert code == 0, err
    assert json.loads(out)["added"] == 6
    ctx = TaskContext.load(market, HttpBlobStore(blob_service.url), task_id, enclave=key)
    assert ctx.shard(3) == corpus.shards[3]
