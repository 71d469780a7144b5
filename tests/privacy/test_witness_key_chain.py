"""``registerWitnessKey`` on a real anvil, through the Python client: a DP task's witness registers
its dispute key (``getEnclave`` then returns it, measurement 0) and every refusal is one decoded
line naming its custom error (a small-order key included); a key another witness registered first
does not lock its holder out; the transaction's gas (docs/gas.md)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SPEC_URI, bond_witnesses, check_error
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.confidential.keystore import new_enclave_key
from syncline.errors import ChainError
from syncline.protocol.enums import Tier

pytestmark = pytest.mark.chain


def test_a_witness_registers_its_dispute_key_once_and_every_refusal_names_its_error(
    market: MarketClient, sponsor: Signer, trainers: list[Signer], witnesses: list[Signer], spec_factory: Any
) -> None:
    task, _ = market.post_task(sponsor, spec_factory(), SPEC_URI)
    bond_witnesses(market, task, witnesses)
    key = new_enclave_key().pubkey
    w = witnesses[0]
    receipt = market.register_witness_key(w, task, key)
    print(f"registerWitnessKey: {receipt['gasUsed']:,} gas")
    assert receipt["gasUsed"] < 100_000
    (event,) = market.events(receipt, "WitnessKeyRegistered")
    assert event["args"]["witness"].lower() == w.address.lower() and bytes(event["args"]["pubkey"]) == key
    assert market.get_enclave(task, w.address) == (key, bytes(32))
    assert market.get_enclave(task, witnesses[1].address) == (bytes(32), bytes(32))

    def refused(name: str, args: dict[str, Any], signer: Signer, task_id: int, pubkey: bytes) -> None:
        with pytest.raises(ChainError) as info:
            market.register_witness_key(signer, task_id, pubkey)
        check_error(info.value, name, args)

    refused(
        "SynclineEnclaveAlreadyRegistered", {"taskId": task, "account": w.address}, w, task, new_enclave_key().pubkey
    )
    # Small-order and non-canonical keys (little-endian u: 1, p - 1, p) are refused by name.
    for u in (1, 2**255 - 20, 2**255 - 19):
        bad = u.to_bytes(32, "little")
        refused("SynclineX25519KeyInvalid", {"pubkey": "0x" + bad.hex()}, witnesses[1], task, bad)
    # No lock-out: a witness copying w's key is not refused (each key is its own slot; the copy
    # reads nothing) and w, had it come second, would have been accepted the same way.
    market.register_witness_key(witnesses[1], task, key)
    assert market.get_enclave(task, witnesses[1].address) == (key, bytes(32))
    assert market.get_enclave(task, w.address) == (key, bytes(32))
    refused("SynclineNotWitness", {"taskId": task, "caller": trainers[0].address}, trainers[0], task, key)
    confidential, _ = market.post_task(sponsor, spec_factory(tier=Tier.CONFIDENTIAL), SPEC_URI)
    bond_witnesses(market, confidential, witnesses)
    refused("SynclineWitnessKeyNeedsAttestation", {"taskId": confidential}, w, confidential, key)
    with pytest.raises(ChainError, match="zero key"):
        market.register_witness_key(w, task, bytes(32))
