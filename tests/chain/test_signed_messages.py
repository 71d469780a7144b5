"""EIP-712 commitments and votes: the Python signer agrees with OpenZeppelin's EIP712 + ECDSA on anvil."""

from __future__ import annotations

from dataclasses import replace

import pytest
from _harness import deploy_harness
from eth_utils import keccak
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web3 import Web3
from web3.contract import Contract

from syncline.chain.keys import Signer
from syncline.paths import repo_root
from syncline.protocol.signed_messages import (
    COMMITMENT_FIELDS,
    VOTE_FIELDS,
    Commitment,
    Domain,
    Vote,
    digest,
    recover,
    sign,
    type_string,
)

pytestmark = [pytest.mark.chain]

HARNESS = "contracts/test/harness/SignedMessagesHarness.sol"
bytes32 = st.binary(min_size=32, max_size=32)


@pytest.fixture(scope="module")
def harness(w3: Web3, sponsor: Signer) -> Contract:
    # The harness runs the market's own digest helpers (it inherits SynclineStorage).
    sources = sorted((repo_root() / "contracts" / "src").rglob("*.sol"))
    return deploy_harness(w3, sponsor, HARNESS, "SignedMessagesHarness", sources)


def _domain(w3: Web3, harness: Contract) -> Domain:
    return Domain(chain_id=int(w3.eth.chain_id), verifying_contract=str(harness.address))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task=st.integers(0, 2**256 - 1),
    round_=st.integers(0, 2**32 - 1),
    fragment=st.integers(0, 2**16 - 1),
    payload=bytes32,
    chunk=bytes32,
    checkpoint=bytes32,
    uri=st.text(max_size=80),
)
def test_commitment_digest_and_signer_match_the_contract(
    w3: Web3,
    harness: Contract,
    trainers: list[Signer],
    task: int,
    round_: int,
    fragment: int,
    payload: bytes,
    chunk: bytes,
    checkpoint: bytes,
    uri: str,
) -> None:
    c = Commitment(task, round_, fragment, payload, chunk, checkpoint, uri)
    domain = _domain(w3, harness)
    assert digest(domain, c) == harness.functions.commitmentDigest(c.as_tuple()).call()
    signature = sign(trainers[0].account, domain, c)
    assert recover(domain, c, signature) == trainers[0].address
    on_chain = harness.functions.recoverCommitment(c.as_tuple(), signature).call()
    assert on_chain == trainers[0].address


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task=st.integers(0, 2**64),
    round_=st.integers(0, 2**32 - 1),
    prev=bytes32,
    state=bytes32,
    aggregate=bytes32,
    mask=st.integers(0, 2**256 - 1),
    metric=st.integers(0, 2**256 - 1),
)
def test_vote_digest_and_signer_match_the_contract(
    w3: Web3,
    harness: Contract,
    witnesses: list[Signer],
    task: int,
    round_: int,
    prev: bytes,
    state: bytes,
    aggregate: bytes,
    mask: int,
    metric: int,
) -> None:
    v = Vote(task, round_, prev, state, aggregate, mask, metric)
    domain = _domain(w3, harness)
    assert digest(domain, v) == harness.functions.voteDigest(v.as_tuple()).call()
    signature = sign(witnesses[1].account, domain, v)
    assert harness.functions.recoverVote(v.as_tuple(), signature).call() == witnesses[1].address


def test_type_strings_are_the_contracts(harness: Contract) -> None:
    """The Python field lists spell the very type strings the market hashes (the uri, the
    previous state root and the metric are signed)."""
    commitment = type_string("Commitment", COMMITMENT_FIELDS)
    vote = type_string("Vote", VOTE_FIELDS)
    assert commitment.endswith(",bytes32 checkpointRoot,string uri)")
    assert vote == (
        "Vote(uint256 taskId,uint32 round,bytes32 prevStateRoot,bytes32 stateRoot,bytes32 aggregateRoot,"
        "uint256 acceptedMask,uint256 metric)"
    )
    assert keccak(text=commitment) == harness.functions.commitmentTypehash().call()
    assert keccak(text=vote) == harness.functions.voteTypehash().call()


def test_a_signature_does_not_replay_across_chain_contract_task_or_round(
    w3: Web3, harness: Contract, trainers: list[Signer]
) -> None:
    domain = _domain(w3, harness)
    c = Commitment(7, 3, 1, b"\x11" * 32, b"\x22" * 32, b"\x33" * 32, "ipfs://c")
    signature = sign(trainers[0].account, domain, c)
    me = trainers[0].address
    assert recover(domain, c, signature) == me
    other_chain = Domain(domain.chain_id + 1, domain.verifying_contract)
    other_contract = Domain(domain.chain_id, "0x" + "ab" * 20)
    assert recover(other_chain, c, signature) != me
    assert recover(other_contract, c, signature) != me
    assert recover(domain, replace(c, task_id=8), signature) != me
    assert recover(domain, replace(c, round=4), signature) != me
    assert recover(domain, replace(c, checkpoint_root=b"\x44" * 32), signature) != me
    assert recover(domain, replace(c, uri="http://dead.invalid/x"), signature) != me  # the locator is signed
    on_chain = harness.functions.recoverCommitment(replace(c, round=4).as_tuple(), signature).call()
    assert on_chain != me
    assert harness.functions.recoverCommitment(replace(c, uri="").as_tuple(), signature).call() != me
    assert harness.functions.recoverCommitment(c.as_tuple(), signature).call() == me


def test_conflicts_are_same_slot_different_content() -> None:
    a = Commitment(1, 2, 3, b"\x01" * 32, b"\x02" * 32, b"\x03" * 32, "ipfs://a")
    assert a.conflicts_with(replace(a, payload_hash=b"\x09" * 32))
    assert a.conflicts_with(replace(a, uri="ipfs://elsewhere"))  # the locator is signed
    assert a.conflicts_with(replace(a, checkpoint_root=b"\x09" * 32))  # another inner-loop history
    assert not a.conflicts_with(a)
    assert not a.conflicts_with(replace(a, round=3, payload_hash=b"\x09" * 32))  # another round
    assert not a.conflicts_with(replace(a, fragment=4, payload_hash=b"\x09" * 32))  # another fragment
    v = Vote(1, 2, b"\x00" * 32, b"\x01" * 32, b"\x02" * 32, 7, 1_500_000)
    assert v.conflicts_with(replace(v, accepted_mask=5))
    assert v.conflicts_with(replace(v, metric=1_400_000))  # the metric is signed
    assert not v.conflicts_with(replace(v, round=3, accepted_mask=5))
    # after a rollback a witness votes again on the restored root: no equivocation
    assert not v.conflicts_with(replace(v, prev_state_root=b"\x0a" * 32, state_root=b"\x0b" * 32))
    with pytest.raises(ValueError, match="32 bytes"):
        Commitment(1, 2, 3, b"\x01", b"\x02" * 32, b"\x03" * 32, "u").message()
    with pytest.raises(ValueError, match="32 bytes"):
        Commitment(1, 2, 3, b"\x01" * 32, b"\x02" * 32, b"", "u").as_tuple()
