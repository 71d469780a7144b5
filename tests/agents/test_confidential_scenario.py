"""``syncline demo --scenario confidential`` end to end (issue 15, items 1-3 and 5), as a user runs
it on a real anvil: a Confidential task whose shards are sealed, an enclave outside the
allow-list refused on chain, attested trainers and witnesses (separate processes) training on the
sealed shards, the run sealed, and no agent's state directory holding any plaintext."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncline.blobstore import LocalBlobStore
from syncline.confidential.manifest import SealedDatasetManifest
from syncline.demo.confidential import PLAN, plaintext_in
from syncline.sponsor.task_builder import cached_corpus

from ._agent_harness import SHARD_COUNT, VOCAB_SIZE

pytestmark = [pytest.mark.chain, pytest.mark.slow]


def test_confidential_scenario_trains_on_sealed_shards(tmp_path: Path, state_env: Path) -> None:
    # the agent tests' session state dir: the contracts and this plan's corpus (6 shards, vocab 512)
    # are already there, so the run pays for neither the compile nor the tokenizer's training
    assert (PLAN.shard_count, PLAN.vocab_size) == (SHARD_COUNT, VOCAB_SIZE)
    state = state_env
    shutil.rmtree(state / "demo" / "confidential", ignore_errors=True)
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(state), "HF_HUB_OFFLINE": "1", "SYNCLINE_LOG_FORMAT": "console"}
    run = subprocess.run(
        [sys.executable, "-m", "syncline.cli", "demo", "--scenario", "confidential"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    workdir = state / "demo" / "confidential"
    receipt = json.loads((workdir / "receipt.json").read_text())

    # The run sealed with every round finalized and every trainer paid.
    assert receipt["status"] == "sealed"
    assert receipt["rounds_finalized"] == receipt["rounds_total"] == PLAN.rounds
    assert all(t["reward_wei"] > 0 and t["slashed_wei"] == 0 for t in receipt["trainers"]), receipt["trainers"]

    # The enclave outside the allow-list was refused on chain with the error naming its measurement.
    rejected = receipt["rejected_enrollment"]
    assert "SynclineMeasurementNotAllowed" in rejected["error"]
    assert rejected["measurement"][2:] in rejected["error"].lower()

    # The sealed manifest: installed on chain, a content address over canonical bytes, every
    # version naming the same ciphertexts (late enclaves re-wrap keys, shards are not re-encrypted).
    versions = receipt["sealed_manifest_versions"]
    assert versions and [v["version"] for v in versions] == sorted({v["version"] for v in versions})
    assert len({tuple(v["ciphertext_hashes"]) for v in versions}) == 1
    final = versions[-1]
    assert receipt["sealed_manifest_hash"] == final["manifest_hash"]
    raw = LocalBlobStore(workdir / "blobs").get(final["manifest_hash"])
    manifest = SealedDatasetManifest.parse(raw)
    assert manifest.manifest_hash == final["manifest_hash"]
    assert len(manifest.enclaves()) == 6  # three trainers and three witnesses
    assert ["0x" + s.ciphertext_hash.hex() for s in manifest.shards] == final["ciphertext_hashes"]

    # No plaintext anywhere an agent wrote: not in its state dir, not in the shared blob store
    # (ciphertexts only), not in the logs; neither raw token bytes nor the corpus's text.
    corpus = cached_corpus(PLAN.shard_count, PLAN.vocab_size, None, None, "pretrain")
    shards = [*corpus.shards, corpus.validation]
    assert receipt["plaintext_in_agent_dirs"] == []
    assert plaintext_in(workdir / "agents", shards) == []
    assert plaintext_in(workdir / "blobs", shards) == []
    assert plaintext_in(workdir / "logs", shards) == []
    for path in (workdir / "agents").rglob("*"):
        if path.is_file():
            assert b"ROMEO" not in path.read_bytes() and b"First Citizen" not in path.read_bytes(), path
    # the search can find what it looks for: the sponsor's plaintext corpus cache is not an agent's
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "leak.bin").write_bytes(b"xx" + shards[1][:200] + b"yy")
    assert plaintext_in(probe, shards) == ["leak.bin"]
