"""Confidential tasks on a real anvil, through the Python client: the devnet attestation service
issues a report, the market's parity check admits or refuses the enclave with one line naming
what differs, plain ``enroll`` is refused, and the sealed manifest is versioned on chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from web3 import Web3

from conftest import SPEC_URI, bond_witnesses, check_error
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.chain.toolchain import compile_contracts
from syncline.confidential.attestation import (
    REPORT_BYTES,
    REPORT_TYPE,
    DevnetAttestationService,
    check_confidential_terms,
    decode_report,
    deploy_devnet_verifier,
    measurement_digest,
)
from syncline.confidential.sealing import enclave_public_key
from syncline.errors import ChainError, SpecError
from syncline.protocol.enums import Tier
from syncline.protocol.hashing import keccak

pytestmark = pytest.mark.chain

SERVICE_KEY = "0x" + keccak(b"syncline devnet attestation service (tests)").hex()
ROGUE_KEY = "0x" + keccak(b"not the attestation service").hex()
GOOD = measurement_digest(b"syncline-trainer-image-v1".ljust(48, b"\0"))
OTHER = measurement_digest(b"syncline-trainer-image-v2".ljust(48, b"\0"))
BAD = measurement_digest(b"debug-image".ljust(48, b"\0"))


def enclave_key(label: str) -> bytes:
    """A real X25519 public key per label (the market refuses small-order and non-canonical ones)."""
    return enclave_public_key(keccak(b"enclave-x25519-" + label.encode()))


@pytest.fixture
def verifier(market: MarketClient, sponsor: Signer) -> str:
    service = DevnetAttestationService(SERVICE_KEY, chain_id=1, verifier="0x" + "11" * 20)
    return deploy_devnet_verifier(market.w3, sponsor, service.address)


@pytest.fixture
def service(market: MarketClient, verifier: str) -> DevnetAttestationService:
    return DevnetAttestationService(SERVICE_KEY, chain_id=market.sender.chain_id, verifier=verifier)


@pytest.fixture
def confidential_task(
    market: MarketClient,
    sponsor: Signer,
    witnesses: list[Signer],
    verifier: str,
    spec_factory: Callable[..., Any],
) -> int:
    """A posted Confidential task, witnesses bonded, its attestation policy set (GOOD, OTHER)."""
    task_id, _ = market.post_task(sponsor, spec_factory(tier=Tier.CONFIDENTIAL), SPEC_URI)
    bond_witnesses(market, task_id, witnesses)
    market.configure_confidential(sponsor, task_id, verifier, [GOOD, OTHER])
    return task_id


def expect(name: str, args: dict[str, Any], call: Callable[[], object]) -> ChainError:
    with pytest.raises(ChainError) as info:
        call()
    check_error(info.value, name, args)
    return info.value


def test_report_encoding_matches_the_verifier(market: MarketClient, service: DevnetAttestationService) -> None:
    artifact = compile_contracts()["DevnetAttestationVerifier"]
    verifier = market.w3.eth.contract(address=service.verifier, abi=artifact.abi)
    assert bytes(verifier.functions.REPORT_TYPEHASH().call()) == keccak(REPORT_TYPE.encode())
    assert verifier.functions.REPORT_LENGTH().call() == REPORT_BYTES
    assert verifier.functions.SERVICE().call() == service.address
    report = service.issue(enclave_key("a"), GOOD, market.address, issued_at=1_700_000_000)
    fields, _ = decode_report(report)
    assert (fields.enclave_pubkey, fields.measurement, fields.operator, fields.issued_at) == (
        enclave_key("a"),
        GOOD,
        market.address,
        1_700_000_000,
    )
    key, measurement, operator, issued_at = verifier.functions.verify(report).call()
    assert (bytes(key), bytes(measurement), operator, issued_at) == (
        enclave_key("a"),
        GOOD,
        market.address,
        1_700_000_000,
    )


def test_attested_trainers_enroll_and_start_the_run(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    service: DevnetAttestationService,
    confidential_task: int,
    verifier: str,
) -> None:
    assert market.get_confidential_config(confidential_task) == (verifier, [GOOD, OTHER])
    stake = market.spec_tuple(confidential_task)[16]
    for i, trainer in enumerate(trainers):
        key, measurement = enclave_key(f"t{i}"), (GOOD, OTHER, GOOD)[i]
        report = service.issue(key, measurement, trainer.address)
        fragment, receipt = market.enroll_attested(trainer, confidential_task, key, measurement, report)
        assert fragment == i
        (admitted,) = market.events(receipt, "EnclaveAdmitted")
        assert admitted["args"]["account"] == trainer.address
        assert bytes(admitted["args"]["enclavePubkey"]) == key
        assert market.get_enclave(confidential_task, trainer.address) == (key, measurement)
        assert market.trainer(confidential_task, trainer.address).stake_wei == stake
    view = market.task(confidential_task)
    assert view.status.name == "RUNNING" and view.enrolled == 3 and view.stake_held_wei == 3 * stake
    assert market.get_enclave(confidential_task, sponsor.address) == (b"\0" * 32, b"\0" * 32)


def test_each_mismatch_is_one_line_naming_it(
    market: MarketClient,
    trainers: list[Signer],
    outsider: Signer,
    service: DevnetAttestationService,
    confidential_task: int,
) -> None:
    t, key = trainers[0], enclave_key("t0")
    task = confidential_task
    report = service.issue(key, GOOD, t.address)
    wrong_key = enclave_key("someone else")
    expect(
        "SynclineAttestationPubkeyMismatch",
        {"claimed": "0x" + wrong_key.hex(), "attested": "0x" + key.hex()},
        lambda: market.enroll_attested(t, task, wrong_key, GOOD, report),
    )
    expect(
        "SynclineAttestationMeasurementMismatch",
        {"claimed": "0x" + OTHER.hex(), "attested": "0x" + GOOD.hex()},
        lambda: market.enroll_attested(t, task, key, OTHER, report),
    )
    expect(
        "SynclineAttestationOperatorMismatch",
        {"claimed": outsider.address, "attested": t.address},
        lambda: market.enroll_attested(outsider, task, key, GOOD, report),
    )
    expect(
        "SynclineMeasurementNotAllowed",
        {"taskId": task, "measurement": "0x" + BAD.hex()},
        lambda: market.enroll_attested(t, task, key, BAD, service.issue(key, BAD, t.address)),
    )
    rogue = DevnetAttestationService(ROGUE_KEY, chain_id=service.chain_id, verifier=service.verifier)
    err = expect(
        "DevnetAttestationWrongSigner",
        {"signer": rogue.address, "service": service.address},
        lambda: market.enroll_attested(t, task, key, GOOD, rogue.issue(key, GOOD, t.address)),
    )
    assert str(err).startswith("enrollAttested reverted: DevnetAttestationWrongSigner(")
    # A report for another chain (or another verifier) recovers to some other key.
    elsewhere = DevnetAttestationService(SERVICE_KEY, chain_id=service.chain_id + 1, verifier=service.verifier)
    with pytest.raises(ChainError) as info:
        market.enroll_attested(t, task, key, GOOD, elsewhere.issue(key, GOOD, t.address))
    assert info.value.error_name == "DevnetAttestationWrongSigner"
    expect(
        "DevnetAttestationBadLength",
        {"length": REPORT_BYTES - 1, "expected": REPORT_BYTES},
        lambda: market.enroll_attested(t, task, key, GOOD, report[:-1]),
    )
    malleable = bytearray(report)
    malleable[-1] = 29  # v neither 27 nor 28
    expect("DevnetAttestationBadSignature", {}, lambda: market.enroll_attested(t, task, key, GOOD, bytes(malleable)))
    assert market.task(task).enrolled == 0
    assert market.get_enclave(task, t.address) == (b"\0" * 32, b"\0" * 32)


def test_plain_enroll_is_refused_on_a_confidential_task(
    market: MarketClient, trainers: list[Signer], confidential_task: int
) -> None:
    err = expect(
        "SynclineUseEnrollAttested",
        {"taskId": confidential_task},
        lambda: market.enroll(trainers[0], confidential_task),
    )
    assert "\n" not in str(err) and str(err).startswith("enroll reverted: SynclineUseEnrollAttested(taskId=")


def test_unconfigured_task_and_configuration_rules(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    outsider: Signer,
    verifier: str,
    service: DevnetAttestationService,
    spec_factory: Callable[..., Any],
) -> None:
    task, _ = market.post_task(sponsor, spec_factory(tier=Tier.CONFIDENTIAL), SPEC_URI)
    key = enclave_key("t0")
    report = service.issue(key, GOOD, trainers[0].address)
    expect(
        "SynclineConfidentialNotConfigured",
        {"taskId": task},
        lambda: market.enroll_attested(trainers[0], task, key, GOOD, report),
    )
    expect(
        "SynclineNotSponsor",
        {"taskId": task, "caller": outsider.address},
        lambda: market.configure_confidential(outsider, task, verifier, [GOOD]),
    )
    expect(
        "SynclineVerifierInvalid",
        {"verifier": outsider.address},
        lambda: market.configure_confidential(sponsor, task, outsider.address, [GOOD]),
    )
    expect(
        "SynclineMeasurementInvalid",
        {"index": 1, "measurement": "0x" + GOOD.hex()},
        lambda: market.configure_confidential(sponsor, task, verifier, [GOOD, GOOD]),
    )
    receipt = market.configure_confidential(sponsor, task, verifier, [GOOD])
    (event,) = market.events(receipt, "ConfidentialConfigured")
    assert [bytes(m) for m in event["args"]["measurements"]] == [GOOD]
    expect(
        "SynclineConfidentialAlreadyConfigured",
        {"taskId": task, "verifier": verifier},
        lambda: market.configure_confidential(sponsor, task, verifier, [OTHER]),
    )
    open_task, _ = market.post_task(sponsor, spec_factory(), SPEC_URI)
    expect(
        "SynclineNotConfidential",
        {"taskId": open_task},
        lambda: market.configure_confidential(sponsor, open_task, verifier, [GOOD]),
    )
    with pytest.raises(ChainError, match="measurements: expected 1 to 16"):
        market.configure_confidential(sponsor, task, verifier, [])


def test_witness_enclave_and_sealed_manifest_versions(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    outsider: Signer,
    service: DevnetAttestationService,
    confidential_task: int,
) -> None:
    task = confidential_task
    w, key = witnesses[0], enclave_key("w0")
    market.register_witness_enclave(w, task, key, GOOD, service.issue(key, GOOD, w.address))
    assert market.get_enclave(task, w.address) == (key, GOOD)
    expect(
        "SynclineEnclaveAlreadyRegistered",
        {"taskId": task, "account": w.address},
        lambda: market.register_witness_enclave(w, task, key, GOOD, service.issue(key, GOOD, w.address)),
    )
    expect(
        "SynclineNotWitness",
        {"taskId": task, "caller": outsider.address},
        lambda: market.register_witness_enclave(outsider, task, key, GOOD, service.issue(key, GOOD, outsider.address)),
    )
    # The witness's enclave key cannot be reused by a trainer of the task.
    t = trainers[0]
    expect(
        "SynclineEnclaveInUse",
        {"taskId": task, "enclavePubkey": "0x" + key.hex(), "holder": w.address},
        lambda: market.enroll_attested(t, task, key, GOOD, service.issue(key, GOOD, t.address)),
    )
    expect(
        "SynclineWitnessCannotTrain",
        {"taskId": task, "witness": witnesses[1].address},
        lambda: market.enroll_attested(
            witnesses[1], task, enclave_key("w1"), GOOD, service.issue(enclave_key("w1"), GOOD, witnesses[1].address)
        ),
    )

    assert market.get_sealed_manifest(task) == (b"\0" * 32, "", 0)
    for version in (1, 2):
        manifest_hash = keccak(f"manifest-v{version}".encode())
        receipt = market.install_sealed_manifest(sponsor, task, manifest_hash, f"ipfs://manifest-v{version}")
        (event,) = market.events(receipt, "SealedManifestInstalled")
        assert event["args"]["version"] == version
        assert market.get_sealed_manifest(task) == (manifest_hash, f"ipfs://manifest-v{version}", version)
    expect(
        "SynclineNotSponsor",
        {"taskId": task, "caller": outsider.address},
        lambda: market.install_sealed_manifest(outsider, task, keccak(b"x"), "ipfs://x"),
    )
    expect(
        "SynclineManifestInvalid",
        {"manifestHash": "0x" + "00" * 32, "uriLength": 8, "max": 512},
        lambda: market.install_sealed_manifest(sponsor, task, b"\0" * 32, "ipfs://x"),
    )
    with pytest.raises(ChainError, match="manifest uri: expected 1 to 512 bytes, got 513"):
        market.install_sealed_manifest(sponsor, task, keccak(b"x"), "x" * 513)


def test_reports_are_bounded_before_any_rpc(
    market: MarketClient, trainers: list[Signer], confidential_task: int
) -> None:
    with pytest.raises(ChainError, match="attestation report: expected 1 to 16384 bytes, got 16385"):
        market.enroll_attested(trainers[0], confidential_task, enclave_key("t"), GOOD, b"\0" * 16_385)
    with pytest.raises(ValueError, match="expected 32 bytes"):
        market.enroll_attested(trainers[0], confidential_task, b"short", GOOD, b"\0" * 193)
    assert Web3.is_address(market.get_confidential_config(confidential_task)[0])


def test_spec_terms_are_compared_with_the_onchain_policy(
    market: MarketClient, confidential_task: int, verifier: str
) -> None:
    onchain = market.get_confidential_config(confidential_task)
    check_confidential_terms(confidential_task, onchain, verifier.lower(), ["0x" + GOOD.hex(), OTHER])
    with pytest.raises(SpecError, match=r"on-chain verifier .* != spec confidential.verifier"):
        check_confidential_terms(confidential_task, onchain, "0x" + "22" * 20, [GOOD, OTHER])
    with pytest.raises(SpecError, match=r"on-chain measurements \[.*\] != spec confidential.measurements"):
        check_confidential_terms(confidential_task, onchain, verifier, [OTHER, GOOD])
    with pytest.raises(SpecError, match="no attestation policy on chain yet"):
        check_confidential_terms(confidential_task, ("0x" + "00" * 20, []), verifier, [GOOD])


def test_gas_of_the_confidential_calls(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    verifier: str,
    service: DevnetAttestationService,
    spec_factory: Callable[..., Any],
) -> None:
    """Transaction gas (21 k base and calldata included) of each new call; docs/gas.md quotes it."""
    task, _ = market.post_task(sponsor, spec_factory(tier=Tier.CONFIDENTIAL), SPEC_URI)
    bond_witnesses(market, task, witnesses)
    used: dict[str, int] = {}
    used["configureConfidential (2 measurements)"] = market.configure_confidential(
        sponsor, task, verifier, [GOOD, OTHER]
    )["gasUsed"]
    w = witnesses[0]
    used["registerWitnessEnclave"] = market.register_witness_enclave(
        w, task, enclave_key("w"), GOOD, service.issue(enclave_key("w"), GOOD, w.address)
    )["gasUsed"]
    for i, t in enumerate(trainers):
        _, receipt = market.enroll_attested(
            t, task, enclave_key(f"t{i}"), GOOD, service.issue(enclave_key(f"t{i}"), GOOD, t.address)
        )
        used[f"enrollAttested #{i + 1}" + (" (starts the run, 3 trainers)" if i == 2 else "")] = receipt["gasUsed"]
    for version in (1, 2):
        used[f"installSealedManifest v{version}"] = market.install_sealed_manifest(
            sponsor,
            task,
            keccak(f"m{version}".encode()),
            "ipfs://bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
        )["gasUsed"]
    plain, _ = market.post_task(sponsor, spec_factory(), SPEC_URI)
    used["enroll #1 (plain, for comparison)"] = market.enroll(trainers[0], plain)[1]["gasUsed"]
    for name, gas in used.items():
        print(f"{name}: {gas:,}")
    assert used["enrollAttested #1"] - used["enroll #1 (plain, for comparison)"] < 120_000
    assert used["enrollAttested #3 (starts the run, 3 trainers)"] < 400_000
