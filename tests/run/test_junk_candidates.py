"""Junk candidates are skipped, never an agent's step failure (issue 26 items 2 and 3).

Item 2: a state blob whose safetensors header has ``"data_offsets": null`` (or a number), uploaded
anonymously under a task's state-root alias after the sponsor published its (then unsigned)
initial state, was the first candidate every agent tried (unsigned candidates: newest first):
``fixed_point.safetensors_spans`` raised ``TypeError`` and ``TaskContext.fetch_state_file``
caught only ``SynclineError`` and ``ValueError``, so ``syncline trainer run`` logged
``agent.step_failed`` on every tick. Now the sponsor signs its slot (tried first) and any
failure of a candidate only skips it.

Item 3: a staked trainer committing a payload with the same header stalled every witness; the
witness's payload checks now reject that submission with a reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from web3 import Web3

from syncline.blobstore import LocalBlobStore
from syncline.chain.devnet import chain_time
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.demo.trainer_setup import TINY_MODEL
from syncline.protocol.disk_round import PayloadFile, open_payloads
from syncline.protocol.hashing import keccak
from syncline.protocol.quantization import quantize
from syncline.protocol.sync_round import CommittedSubmission, validate_submissions
from syncline.run.context import TaskContext
from syncline.sponsor.task_builder import PublishedTask, publish_language_task
from syncline.trainer.agent import junk_data_offsets

pytestmark = pytest.mark.chain

ETH = 10**18


def publish(blobs: LocalBlobStore, w3: Web3, witnesses: list[Signer], sponsor: Signer | None) -> PublishedTask:
    template: dict[str, Any] = {
        "name": "junk-candidates",
        "tier": "verified",
        "aggregation": {"rule": "coordinate_median"},
        "inner_steps": 4,
        "checkpoint_interval": 2,
        "rounds": 2,
        "round_duration_s": 300,
        "grace_window_s": 120,
        "challenge_window_s": 600,
        "trainer_stake_wei": ETH,
        "min_trainers": 3,
        "max_trainers": 3,
        "enrollment_deadline": chain_time(w3) + 600,
        "witnesses": [w.address for w in witnesses],
        "threshold": 2,
        "witness_fee_wei": ETH // 100,
        "reward_pool_wei": 3 * ETH,
        "witness_bond_wei": ETH // 2,
        "challenge_bond_wei": ETH // 10,
    }
    return publish_language_task(
        blobs,
        template=template,
        shard_count=3,
        vocab_size=300,
        seq_len=16,
        model=TINY_MODEL,
        **({} if sponsor is None else {"sponsor": sponsor.account}),
    )


@pytest.mark.parametrize("signed", [True, False], ids=["sponsor-signed", "unsigned-browser-wallet"])
def test_a_junk_state_candidate_under_the_root_alias_is_skipped(
    tmp_path: Path, market: MarketClient, w3: Web3, sponsor: Signer, witnesses: list[Signer], signed: bool
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish(blobs, w3, witnesses, sponsor if signed else None)
    root = published.initial_state.state_root_hex
    good = published.initial_state.to_bytes()
    for offsets in (None, 7, "0", [None, 3]):  # anonymous uploads after the sponsor's: listed first
        blobs.put(junk_data_offsets(good, offsets), alias=root)
    task_id, _ = market.post_task(sponsor, published.spec, published.spec_uri)
    ctx = TaskContext.load(market, blobs, task_id)

    ordered = blobs.candidates(root, signers=ctx.publishers())
    assert (ordered[0].removeprefix("0x") == keccak(good).hex()) is signed  # the sponsor's slot first
    state, size = ctx.fetch_state_file(root, tmp_path / "state.bin")  # the trainer's sync
    assert state.state_root_hex == root and size == len(good)
    assert ctx.fetch_state(root).state_root_hex == root  # the in-memory path (witness, referee)


def test_a_staked_trainers_junk_payload_is_rejected_not_a_witness_failure(tmp_path: Path) -> None:
    """The witness's checks of committed payloads, in memory and on disk: the junk submission is
    rejected with a reason, the honest ones are kept."""
    numel = 300
    honest = [quantize(torch.linspace(-1, 1, numel) * (i + 1), 8) for i in range(2)]
    payloads = [q.to_safetensors_bytes() for q in honest]
    from syncline.protocol.chunking import gradient_chunk_root

    roots = [gradient_chunk_root(q) for q in honest]
    bad = {
        2: junk_data_offsets(payloads[0], None),
        3: junk_data_offsets(payloads[0], 12),
        4: junk_data_offsets(payloads[0], [0, "8"]),
    }
    subs = [CommittedSubmission(i, keccak(p), r, p) for i, (p, r) in enumerate(zip(payloads, roots, strict=True))]
    subs += [CommittedSubmission(i, keccak(p), roots[0], p) for i, p in bad.items()]
    valid, rejected = validate_submissions(subs, numel=numel, bits=8, max_bytes=1 << 20)
    assert [f for f, _ in valid] == [0, 1]
    assert set(rejected) == set(bad) and all(r.startswith("malformed payload") for r in rejected.values()), rejected

    files = []
    for s in subs:
        path = tmp_path / f"payload-{s.fragment}"
        assert s.payload is not None
        path.write_bytes(s.payload)
        files.append(PayloadFile(s.fragment, s.payload_hash, s.chunk_root, str(path)))
    valid_files, rejected_files = open_payloads(files, numel=numel, bits=8, max_bytes=1 << 20)
    assert [f for f, _ in valid_files] == [0, 1]
    assert set(rejected_files) == set(bad), rejected_files
