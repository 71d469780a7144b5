"""The ``confidential`` scenario: a Confidential task trained on sealed shards by attested enclaves
(issue 15, items 1-3 and 5).

1. **Attestation.** The devnet attestation service (a key the ``DevnetAttestationVerifier``
   trusts) is deployed; the sponsor publishes the Shakespeare task with its shards sealed
   (AES-256-GCM, each under its own data key; only ciphertexts reach the blob store), posts it and
   installs the policy: the verifier and a one-entry measurement allow-list (the "trainer image").
2. **A refused enclave.** An extra account runs a debug image: its attestation report is genuine,
   but its measurement is not on the allow-list, so ``enrollAttested`` reverts with
   ``SynclineMeasurementNotAllowed``; the receipt records the error.
3. **Attested agents.** Every trainer and witness gets a fresh X25519 enclave key in an encrypted
   keystore (its password only in that agent's environment) and a report binding the key, the
   allowed measurement and its account. Trainers enroll with ``enrollAttested``, witnesses
   register their enclaves.
4. **Sealed manifest.** While they are admitted, the sponsor wraps the data keys to every new
   enclave (HPKE, RFC 9180) and installs each new manifest version on chain; the shards are never
   re-encrypted (every version names the same ciphertext hashes).
5. **Training.** Trainers and witnesses open their shards in memory and the run seals as usual;
   afterwards the scenario searches every agent's state directory for the plaintext (raw token
   bytes of every shard) and records what it found (nothing).

``receipt.json`` adds ``sealed_manifest_hash``, ``sealed_manifest_versions``,
``rejected_enrollment`` and ``plaintext_in_agent_dirs``.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from pathlib import Path
from typing import Any

from syncline.blobstore import BlobStore
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.confidential.attestation import DevnetAttestationService, deploy_devnet_verifier, measurement_digest
from syncline.confidential.enclave import write_attestation_file
from syncline.confidential.keystore import (
    ENCLAVE_PASSWORD_ENV,
    StoreBinding,
    new_enclave_key,
    write_data_keys,
    write_enclave_keystore,
)
from syncline.confidential.manifest import MAX_MANIFEST_BYTES, SealedDatasetManifest
from syncline.confidential.sponsor import SealingRequest, admitted_enclaves, install_manifest, task_spec
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.demo.training_run import DemoPlan, TrainingDemo
from syncline.errors import ChainError
from syncline.observability import get_logger
from syncline.protocol.enums import TaskStatus
from syncline.protocol.hashing import keccak
from syncline.protocol.receipt import TrainingReceipt
from syncline.sponsor.task_builder import PublishedTask, cached_corpus, publish_language_task

log = get_logger("syncline.demo.confidential")

TASK_NAME = "shakespeare-llama-confidential"
TRAINER_IMAGE = measurement_digest(b"syncline-trainer-image-v1".ljust(48, b"\0"))
"""The one measurement the task admits (the keccak256 of a 48-byte launch measurement)."""
DEBUG_IMAGE = measurement_digest(b"syncline-debug-image".ljust(48, b"\0"))
"""The refused enclave's measurement: attested, but not on the allow-list."""
PLAN = dataclasses.replace(
    DemoPlan(),
    rounds=2,
    inner_steps=8,
    checkpoint_interval=4,
    vocab_size=512,
    seq_len=32,
    inner_lr=3e-3,
    model=dict(TINY_MODEL),
    timeout_s=420.0,
)
"""The CI's tiny Llama (vocab 512, sequences of 32), two rounds of 8 inner steps: the scenario is
about who can read the data, not the loss."""
PLAINTEXT_WINDOW = 48
"""Bytes of each shard the state-directory search looks for (at its start, middle and end)."""


class ConfidentialDemo:
    """Runs the scenario in ``workdir`` (``.syncline/demo/confidential``)."""

    def __init__(self, workdir: Path, plan: DemoPlan = PLAN):
        self.workdir = workdir
        self.plan = plan
        self.keys_file = workdir / "sponsor" / "sealing-keys.json"
        self._sealing_password = secrets.token_hex(16)
        self._service_key = "0x" + secrets.token_hex(32)
        self._service: DevnetAttestationService | None = None
        self._sponsor: Signer | None = None
        self._sponsor_address: str | None = None
        self._blobs: BlobStore | None = None
        self._admitted = 0
        self.versions: list[dict[str, Any]] = []
        self.rejected: dict[str, Any] | None = None
        self.plaintext_shards: list[bytes] = []

    # ------------------------------------------------------------------ sponsor

    def publish(self, blobs: BlobStore, template: dict[str, Any]) -> PublishedTask:
        """Seal the Shakespeare shards and publish the task (verifier deployed first: the spec names it)."""
        assert self._service is not None
        self._blobs = blobs
        published = publish_language_task(
            blobs,
            template={**template, "name": TASK_NAME},
            shard_count=self.plan.shard_count,
            vocab_size=self.plan.vocab_size,
            seq_len=self.plan.seq_len,
            model=self.plan.model,
            seal=SealingRequest(self._service.verifier, ("0x" + TRAINER_IMAGE.hex(),)),
        )
        assert published.sealed is not None
        assert published.spec.confidential is not None and self._sponsor_address is not None
        c = published.spec.confidential
        binding = StoreBinding.of(self._sponsor_address, c.verifier, c.measurements)
        write_data_keys(self.keys_file, published.sealed, self._sealing_password, binding=binding)
        corpus = cached_corpus(self.plan.shard_count, self.plan.vocab_size, None, None, "pretrain")
        self.plaintext_shards = [*corpus.shards, corpus.validation]
        return published

    def after_post(self, market: MarketClient, task_id: int, published: PublishedTask, sponsor: Signer) -> None:
        """Install the attestation policy, then show a debug enclave refused."""
        assert self._service is not None and published.spec.confidential is not None
        self._sponsor = sponsor
        market.configure_confidential(sponsor, task_id, self._service.verifier, [TRAINER_IMAGE])
        log.info("sponsor.confidential_configured", task_id=task_id, verifier=self._service.verifier)
        intruder = from_private_key("0x" + keccak(b"syncline confidential demo: debug enclave").hex())
        market.w3.provider.make_request("anvil_setBalance", [intruder.address, hex(10**21)])  # type: ignore[arg-type]
        key = new_enclave_key()
        report = self._service.issue(key.pubkey, DEBUG_IMAGE, intruder.address)
        try:
            market.enroll_attested(intruder, task_id, key.pubkey, DEBUG_IMAGE, report)
        except ChainError as exc:
            self.rejected = {
                "account": intruder.address,
                "enclave_pubkey": "0x" + key.pubkey.hex(),
                "measurement": "0x" + DEBUG_IMAGE.hex(),
                "error": str(exc),
            }
            log.info("demo.enrollment_rejected", account=intruder.address, error=str(exc))
        else:
            raise AssertionError("an enclave outside the allow-list was admitted")

    def agent_setup(self, name: str, agent_dir: Path, account: str) -> tuple[dict[str, Any], dict[str, str]]:
        """A fresh enclave key in an encrypted keystore and the service's report for it."""
        assert self._service is not None
        password = secrets.token_hex(16)
        key = new_enclave_key()
        # a random 128-bit password: scrypt's work factor protects nothing more, so keep it light
        keystore = write_enclave_keystore(key, agent_dir / "enclave-keystore.json", password, scrypt_n=1 << 12)
        report = self._service.issue(key.pubkey, TRAINER_IMAGE, account)
        attestation = write_attestation_file(agent_dir / "enclave-attestation.json", key.pubkey, TRAINER_IMAGE, report)
        config = {"enclave_keystore": str(keystore), "enclave_attestation": str(attestation)}
        return config, {ENCLAVE_PASSWORD_ENV: password}

    def on_tick(self, market: MarketClient, task_id: int) -> None:
        """Seal the data keys to every enclave the chain admitted since the last look."""
        status = market.task(task_id).status
        if status not in (TaskStatus.ENROLLING, TaskStatus.RUNNING) or self._sponsor is None:
            return
        blobs = self._blobs
        assert blobs is not None
        spec = task_spec(market, blobs, task_id)
        admitted = len(admitted_enclaves(market, task_id, spec))
        if admitted == self._admitted:
            return
        installed = install_manifest(
            market, self._sponsor, blobs, task_id, self.keys_file, password=self._sealing_password
        )
        self._admitted = admitted
        if installed.added:  # the ciphertext hashes as this version names them (the same in every version)
            manifest = SealedDatasetManifest.parse(blobs.get(installed.manifest_hash, max_bytes=MAX_MANIFEST_BYTES))
            hashes = ["0x" + shard.ciphertext_hash.hex() for shard in manifest.shards]
            self.versions.append({**installed.to_mapping(), "ciphertext_hashes": hashes})

    # ------------------------------------------------------------------ run

    def before_publish(self, market: MarketClient, sponsor: Signer) -> None:
        """Deploy the devnet verifier trusting a fresh attestation-service key (the spec names it)."""
        chain_id = market.w3.eth.chain_id
        address = DevnetAttestationService(self._service_key, chain_id=chain_id, verifier="0x" + "11" * 20).address
        verifier = deploy_devnet_verifier(market.w3, sponsor, address)
        self._service = DevnetAttestationService(self._service_key, chain_id=chain_id, verifier=verifier)
        self._sponsor_address = sponsor.address
        log.info("demo.verifier_deployed", verifier=verifier, service=address)

    def run(self) -> TrainingReceipt:
        started = time.monotonic()
        demo = TrainingDemo(self.workdir, self.plan)
        demo.before_publish = self.before_publish
        demo.publish_task = self.publish
        demo.after_post = self.after_post
        demo.agent_setup = self.agent_setup
        demo.on_tick = self.on_tick
        receipt = demo.run()
        found = plaintext_in(self.workdir / "agents", self.plaintext_shards)
        extras = dict(receipt.extras)
        extras.update(
            scenario="confidential",
            sealed_manifest_hash=self.versions[-1]["manifest_hash"] if self.versions else None,
            sealed_manifest_versions=self.versions,
            rejected_enrollment=self.rejected,
            attestation_verifier=self._service.verifier if self._service else None,
            allowed_measurements=["0x" + TRAINER_IMAGE.hex()],
            plaintext_in_agent_dirs=found,
            wall_seconds=round(time.monotonic() - started, 1),
        )
        return TrainingReceipt(**{**receipt.__dict__, "extras": extras})


def plaintext_in(root: Path, shards: list[bytes], window: int = PLAINTEXT_WINDOW) -> list[str]:
    """Files under ``root`` holding any ``window``-byte piece (start, middle, end) of any shard."""
    needles = []
    for shard in shards:
        if len(shard) >= window:
            middle = len(shard) // 2
            needles += [shard[:window], shard[middle : middle + window], shard[-window:]]
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if any(n in data for n in needles):
            found.append(str(path.relative_to(root)))
    return found


__all__ = ["ConfidentialDemo", "plaintext_in"]
