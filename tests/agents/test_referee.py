"""Training-fraud proofs: refereed re-execution of one segment of a trainer's inner loop.

On anvil, with the real contract and chain client: three in-process ``TrainerAgent``s (honest,
lazy, fake-gradient) enroll and train-and-commit round 0 (training with checkpoint capture,
payload, checkpoint blobs and manifest published to a real ``LocalBlobStore``, signed commitments
on chain); two witnesses finalize round 0 with its real result; the agents then train round 1 from
that state, so c_0 of round 1 holds the AdamW state carried over from round 0. The referee reads
everything back through ``TaskContext.load``: the spec, the submission (payload hash, chunk root,
checkpoint root), the round's start state (``prevStateRoot``) and the trainer's shards (from the
``ShardsAssigned`` logs) -- ``referee_segment`` / ``find_faulty_segment``.

The tests under "the pure core" call ``check_segment`` / ``find_faulty`` with explicit inputs and
an in-memory fetcher: they test the judging logic itself on bytes the test controls (tampered,
re-committed, trained from another state, replayed on other shards), which no honest agent would
publish; one reads shard sets from crafted event logs (ordering logic only, no chain needed).

Model: a 1-layer Llama (hidden 32, vocab 256, ~18k parameters) on synthetic token shards,
H = 6 AdamW steps per round, a checkpoint every 2 steps (S = 3 training segments + derivation).
"""

from __future__ import annotations

import dataclasses
import http.client
import shutil
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from eth_account import Account
from eth_utils import keccak
from web3 import Web3

from conftest import chain_snapshot_ctx
from syncline.blobstore import MAX_ANONYMOUS_CANDIDATES, BlobService, HttpBlobStore, LocalBlobStore, put_signed
from syncline.chain.devnet import set_next_timestamp
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.challenger.agent import Challenger
from syncline.court.duty import RefereeDuty
from syncline.court.referee import (
    Claim,
    RefereeError,
    ReplayInputs,
    Undecided,
    Verdict,
    _shard_assignments,
    check_segment,
    find_faulty,
    find_faulty_segment,
    load_case,
    referee_segment,
)
from syncline.court.sampling import make_training_checker
from syncline.court.withheld import MANIFEST, FetchTry, withheld_claim_segment, withheld_segments
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointManifest,
    checkpoint_hash,
    checkpoint_root,
    manifest_alias,
    manifest_root_alias,
    segment_count,
)
from syncline.protocol.enums import ChallengeStatus, RoundStatus, TaskStatus
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.seeds import round_seed
from syncline.protocol.spec import DatasetManifest, ModelArchitecture, TrainingTaskSpec
from syncline.protocol.spot_checks import checkpoints_for_segment, spot_check_deadline
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig, config_from_mapping
from syncline.run.context import TaskContext
from syncline.trainer.agent import TrainerAgent
from syncline.trainer.inner_loop import InnerLoop
from syncline.trainer.segments import derive_payload, encode_payload

H, INTERVAL, BATCH, SEQ = 6, 2, 4, 32
S = segment_count(H, INTERVAL)
MODEL: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": SEQ,
    "tie_word_embeddings": True,
    "vocab_size": 256,
}
INNER = {"lr": 3e-3, "inner_steps": H, "batch_size": BATCH}
MODES = ("honest", "lazy", "fake-gradient")


@dataclass
class World:
    ctx: TaskContext
    market: MarketClient
    store: LocalBlobStore
    starts: tuple[TrainingState, TrainingState]  # the start states of rounds 0 and 1
    agents: dict[str, TrainerAgent]

    @property
    def task_id(self) -> int:
        return self.ctx.task_id

    def fragment(self, mode: str) -> int:
        return self.market.trainer(self.task_id, self.agents[mode].signer.address).fragment

    def shards(self, mode: str) -> list[bytes]:
        return [self.ctx.shard(i) for i in self.market.trainer(self.task_id, self.agents[mode].signer.address).shards]


def _shard(seed: int, tokens: int = 3000) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, tokens).astype("<u2").tobytes()


def _agent(
    mode: str, signer: Signer, task_id: int, world_dir: Path, market: MarketClient, store: LocalBlobStore
) -> TrainerAgent:
    cfg = config_from_mapping(
        {
            "node_rpc": "http://127.0.0.1:1",
            "task_id": task_id,
            "deployment": str(world_dir / "deployment.json"),
            "blob_store": str(world_dir / "blobs"),
            "state_dir": str(world_dir / mode),
            "misbehave": None if mode == "honest" else mode,
            "inner": INNER,
        }
    )
    return TrainerAgent(cfg=cfg, signer=signer, market=market, blobs=store)


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    w3: Web3,
    session_market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Any,
) -> Iterator[World]:
    root = tmp_path_factory.mktemp("referee")
    market = session_market
    store = LocalBlobStore(root / "blobs", fsync=False)
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model({"family": "llama", **MODEL}, seed=0)
    layout = ParameterLayout.from_state_dict(dict(net.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(net.named_parameters()), layout)
    store.put(start.to_bytes(), alias=start.state_root_hex)
    shards = [store.put(_shard(i)) for i in range(3)]
    tokenizer = store.put(b"{}")  # TaskContext only pins it; this task never tokenizes text
    with chain_snapshot_ctx(w3):
        spec: TrainingTaskSpec = spec_factory(
            model=ModelArchitecture(family="llama", config=MODEL),
            dataset=DatasetManifest(
                shard_hashes=tuple(r.digest for r in shards), shard_uris=tuple(r.uri for r in shards)
            ),
            inner_steps=H,
            checkpoint_interval=INTERVAL,
            param_count=layout.numel,
            initial_state_root=start.state_root_hex,
            min_trainers=3,
            max_trainers=3,
            round_duration_s=600,
            gradient_bits=8,
            metadata={"tokenizer": {"digest": tokenizer.digest, "uri": tokenizer.uri}, "seq_len": SEQ},
        )
        task_id, _ = market.post_task(sponsor, spec, store.put(spec.canonical_bytes()).uri)
        agents = {
            mode: _agent(mode, signer, task_id, root, market, store)
            for mode, signer in zip(MODES, trainers, strict=True)
        }
        for agent in agents.values():
            agent.step()  # enroll; the third enrollment starts the run
        assert market.task(task_id).status == TaskStatus.RUNNING
        torch.manual_seed(1234)  # the fake gradient's noise
        for agent in agents.values():
            agent.step()  # train round 0 and commit
        for agent in agents.values():
            agent._reveal()  # the third commit closed round 0's commit phase: reveal (§10.6)
        # Two witnesses compute round 0, publish the new state and finalize: round 1 opens from it.
        ctx = TaskContext.load(market, store, task_id)
        result = ctx.compute_round(start, ctx.committed_submissions(0))
        assert result.accepted_mask == 0b111
        ctx.publish_state(result.state)
        set_next_timestamp(w3, market.round_deadline(task_id) + 1)
        for witness in witnesses[: spec.threshold]:
            market.ensure_witness_bonded(witness, task_id)
            market.finalize_round(witness, task_id, 0, result.state_root, result.aggregate_root, result.accepted_mask)
        assert market.round(task_id, 0).status == RoundStatus.FINALIZED
        assert market.task(task_id).current_round == 1
        for agent in agents.values():
            agent.step()  # re-derive round 1's start state from the payloads, train round 1 and commit
        assert market.round(task_id, 1).committed_mask == 0b111
        for agent in agents.values():
            agent._reveal()  # round 1's commit phase closed too
        yield World(ctx, market, store, (start, result.state), agents)


def _verdicts(world: World, round_: int, mode: str) -> list[Verdict]:
    return [referee_segment(world.ctx, round_, world.fragment(mode), s) for s in range(S + 1)]


# ---------------------------------------------------------------------- through the agent, the chain and TaskContext


@pytest.mark.chain
def test_honest_trainer_is_innocent_on_every_segment(world: World) -> None:
    assert world.ctx.spec.checkpoint_interval_steps == INTERVAL, "the spec must carry checkpoint_interval"
    for round_ in (0, 1):
        verdicts = _verdicts(world, round_, "honest")
        assert [v.guilty for v in verdicts] == [False] * (S + 1), [v.reason for v in verdicts]
        assert verdicts[-1].derivation and not verdicts[0].derivation
        assert find_faulty_segment(world.ctx, round_, world.fragment("honest")) is None


@pytest.mark.chain
def test_capturing_checkpoints_does_not_change_training(world: World) -> None:
    """The honest agent's committed payload equals that of a plain run without checkpoints."""
    ctx = world.ctx
    loop = InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, InnerOptimizerConfig(**INNER))
    fragment = world.fragment("honest")
    for round_ in (0, 1):
        work = loop.run(world.starts[round_], world.shards("honest"), seed=round_seed(world.task_id, round_, fragment))
        assert work.checkpoints == ()
        payload, chunk_root = encode_payload(work.pseudo_gradient, 8)
        sub = world.market.submission(world.task_id, round_, fragment)
        assert sub.payload_hash == "0x" + keccak(payload).hex()
        assert sub.chunk_root == "0x" + chunk_root.hex()


@pytest.mark.chain
def test_published_checkpoints_and_manifest(world: World) -> None:
    numel = world.ctx.layout.numel
    for mode in MODES:
        for round_ in (0, 1):
            fragment = world.fragment(mode)
            sub = world.market.submission(world.task_id, round_, fragment)
            digest = world.store.resolve(manifest_alias(world.task_id, round_, fragment))
            assert digest is not None
            manifest = CheckpointManifest.from_json(world.store.get(digest))
            manifest.verify_against(sub.checkpoint_root)  # the committed root opens to these hashes
            assert (manifest.interval, manifest.inner_steps, manifest.segments) == (INTERVAL, H, S)
            blobs = [world.store.get(manifest.digest(i)) for i in range(S + 1)]
            for i, data in enumerate(blobs):
                ckpt = Checkpoint.from_bytes(data, layout=world.ctx.layout)
                assert ckpt.step == min(i * INTERVAL, H)
                assert 12 * numel < len(data) < 12 * numel + 8192  # 12 bytes per parameter + header + RNG state
            if mode == "honest" and round_ == 1:
                c0 = Checkpoint.from_bytes(blobs[0], layout=world.ctx.layout)
                assert set(c0.adam_steps) == {H}, "round 1 starts with the AdamW state carried from round 0"


@pytest.mark.chain
def test_lazy_trainer_is_caught_on_a_training_segment(world: World) -> None:
    for round_ in (0, 1):
        verdicts = _verdicts(world, round_, "lazy")
        # It trained steps 0..2 of 6 and padded c_2, c_3 with that state: segment 0 (steps 0-1) is
        # real; re-running segments 1 and 2 exposes the padding; its payload is derived from c_3.
        assert [v.guilty for v in verdicts] == [False, True, True, False], [v.reason for v in verdicts]
        assert "does not give checkpoint 2" in verdicts[1].reason
        found = find_faulty_segment(world.ctx, round_, world.fragment("lazy"))
        assert found is not None and found.segment == 1 and found.guilty


@pytest.mark.chain
def test_fake_gradient_is_caught_on_the_derivation_segment(world: World) -> None:
    for round_ in (0, 1):
        verdicts = _verdicts(world, round_, "fake-gradient")
        assert [v.guilty for v in verdicts] == [False] * S + [True], [v.reason for v in verdicts]
        found = find_faulty_segment(world.ctx, round_, world.fragment("fake-gradient"))
        assert found is not None and found.derivation and "payload" in found.reason


@pytest.mark.chain
def test_corrupt_or_missing_blobs_leave_the_referee_undecided(world: World) -> None:
    """The honest trainer's c_1 of round 1 rots in the store, then vanishes, then so does every
    manifest: the referee cannot judge what it cannot obtain, and says so (never guilty). The store
    is repaired afterwards (a put stores a blob again)."""
    ctx, store, fragment = world.ctx, world.store, world.fragment("honest")
    manifest = CheckpointManifest.from_json(store.get(store.resolve(manifest_alias(world.task_id, 1, fragment)) or ""))
    path = store.blob_path(manifest.digest(1))
    original = path.read_bytes()
    aliases = {p: p.with_name(p.name + ".hidden") for p in store.aliases_dir.glob("checkpoints:*")}
    try:
        rotten = bytearray(original)
        rotten[-1] ^= 1
        path.write_bytes(bytes(rotten))
        outcome = referee_segment(ctx, 1, fragment, 1)
        assert isinstance(outcome, Undecided) and not outcome.guilty
        assert "checkpoint 1 is unavailable" in outcome.reason
        assert referee_segment(ctx, 1, fragment, 0) == Verdict(0, S, False, "steps 0..1 re-run bit-exactly")
        path.unlink(missing_ok=True)
        assert isinstance(referee_segment(ctx, 1, fragment, 1), Undecided)
        assert isinstance(find_faulty_segment(ctx, 1, fragment), Undecided)
        # The manifest gone from both aliases: no segment can be judged.
        for alias, hidden in aliases.items():
            alias.rename(hidden)
        outcome = referee_segment(ctx, 1, fragment, 2)
        assert isinstance(outcome, Undecided) and "manifest" in outcome.reason
    finally:
        store.put(original)
        for alias, hidden in aliases.items():
            if hidden.exists():
                hidden.rename(alias)
    assert find_faulty_segment(ctx, 1, fragment) is None


@pytest.mark.chain
def test_segment_out_of_range_and_missing_submission(world: World) -> None:
    with pytest.raises(RefereeError):
        referee_segment(world.ctx, 1, world.fragment("honest"), S + 1)
    with pytest.raises(RefereeError, match="no submission"):
        referee_segment(world.ctx, 1, 9, 0)


# ---------------------------------------------------------------------- aliases are hints, unavailable is not guilty


@contextmanager
def _served_copy(world: World, tmp_path: Path) -> Iterator[tuple[BlobService, TaskContext]]:
    """A real blob service over a copy of the world's store, and a TaskContext that reads through it."""
    root = tmp_path / "served"
    shutil.copytree(world.store.root, root)
    with BlobService(LocalBlobStore(root, fsync=False)) as service:
        yield service, TaskContext.load(world.market, HttpBlobStore(service.url, timeout_s=5), world.task_id)


@contextmanager
def _hidden(store: LocalBlobStore, digests: list[str]) -> Iterator[None]:
    """Blobs made unreachable through every other locator (their ``file://`` URIs) for a while."""
    moved = {store.blob_path(d): store.blob_path(d).with_suffix(".hidden") for d in digests}
    for path, aside in moved.items():
        path.rename(aside)
    try:
        yield
    finally:
        for path, aside in moved.items():
            aside.rename(path)


def _checkpoint_digests(world: World, round_: int) -> list[str]:
    digests: list[str] = []
    for mode in MODES:
        alias = manifest_alias(world.task_id, round_, world.fragment(mode))
        manifest = CheckpointManifest.from_json(world.store.get(world.store.resolve(alias) or ""))
        digests += [manifest.digest(i) for i in range(S + 1)]
    return list(dict.fromkeys(digests))  # round 0's c_0 is the same blob for every trainer


def _put_anonymously(url: str, data: bytes, alias: str) -> None:
    """A PUT from anyone: no key, no stake."""
    status, _ = _http(url, "PUT", "/blobs", data, {"X-Syncline-Alias": alias})
    assert status == 200


def _http(url: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.chain
def test_alias_poisoning_convicts_no_one(world: World, tmp_path: Path) -> None:
    """Issue 10 #5: two anonymous PUTs of a forged manifest under the trainer's manifest aliases
    used to make every segment of an honest submission guilty. Now the referee takes the
    candidates as hints, keeps the one that opens the committed root, and finds the trainer
    innocent; a flood that fills the anonymous ring does not displace the trainer's signed slot."""
    fragment = world.fragment("honest")
    claim = Claim.of(world.market.submission(world.task_id, 1, fragment))
    aliases = (manifest_root_alias(claim.checkpoint_root), manifest_alias(world.task_id, 1, fragment))
    forged = CheckpointManifest(INTERVAL, H, tuple(keccak(b"forged %d" % i) for i in range(S + 1)), ("",) * (S + 1))
    with _served_copy(world, tmp_path) as (service, ctx):
        for alias in aliases:
            _put_anonymously(service.url, forged.to_json(), alias)
        outcomes = [referee_segment(ctx, 1, fragment, s) for s in range(S + 1)]
        assert [o.guilty for o in outcomes] == [False] * (S + 1), [o.reason for o in outcomes]
        assert all("re-run bit-exactly" in o.reason or "derived" in o.reason for o in outcomes)
        for i in range(3 * MAX_ANONYMOUS_CANDIDATES):
            for alias in aliases:
                _put_anonymously(service.url, forged.to_json() + b" " * (i + 1), alias)
        found = find_faulty_segment(ctx, 1, fragment)
        assert found is None, found
        lazy = find_faulty_segment(ctx, 1, world.fragment("lazy"))  # the poison hides no real fault either
        assert lazy is not None and lazy.guilty and lazy.segment == 1


@pytest.mark.chain
def test_a_blob_outage_mid_check_is_never_a_guilty_verdict(world: World, tmp_path: Path) -> None:
    """Issue 10 #6: the blob service dies after the referee read the manifest and the start state;
    every checkpoint fetch is refused. That used to read 'checkpoint N is unavailable' -> guilty."""
    fragment = world.fragment("honest")
    with _served_copy(world, tmp_path) as (service, ctx), _hidden(world.store, _checkpoint_digests(world, 1)):
        case = load_case(ctx, 1, fragment)
        assert case.manifest is not None
        service.stop()
        outcomes = [check_segment(s, case.claim, case.manifest, case.fetch, case.inputs) for s in range(S + 1)]
        assert not any(o.guilty for o in outcomes), [o.reason for o in outcomes]
        assert all("unavailable" in o.reason for o in outcomes)
        assert find_faulty(case.claim, case.manifest, case.fetch, case.inputs) is not None  # undecided, not None
        assert not find_faulty(case.claim, case.manifest, case.fetch, case.inputs).guilty  # type: ignore[union-attr]


@pytest.mark.chain
def test_unavailable_checkpoints_bring_no_claim_and_no_guilty_vote(
    world: World, tmp_path: Path, w3: Web3, witnesses: list[Signer], outsider: Signer
) -> None:
    """Issue 10 #6 through the agents' own code on anvil: round 0's checkpoints cannot be had (the
    blob service answers 404, no other locator has them). The challenger opens no claim (it audits
    again later); a referee of a claim someone else opened casts no vote, retries, and abstains
    once the deadline passed. With the checkpoints back, the same code accuses the lazy and the
    fake-gradient trainers and votes the honest one innocent."""
    market = world.market
    honest, lazy, fake = (world.fragment(mode) for mode in MODES)
    with chain_snapshot_ctx(w3), _served_copy(world, tmp_path) as (_service, ctx):
        digests = _checkpoint_digests(world, 0)
        for digest in digests:
            LocalBlobStore(tmp_path / "served", fsync=False).blob_path(digest).unlink()  # the service: 404
        before = market.challenge_count()
        challenger = Challenger(
            task_id=world.task_id,
            signer=outsider,
            market=market,
            blobs=ctx.blobs,
            training_checker=make_training_checker("all"),
            withdraw=False,
            ctx=ctx,
        )
        duty = RefereeDuty(ctx, witnesses[0])
        with _hidden(world.store, digests):
            challenger.step()
            assert market.challenge_count() == before, "an unavailable checkpoint became an accusation"
            assert 0 not in challenger.audited  # round 0 is audited again later
            claim = market.challenge_training(outsider, world.task_id, 0, honest, 1)
            duty.step()
            c = market.challenge(claim)
            assert (c.guilty_votes, c.innocent_votes) == (0, 0) and claim not in duty.decided

        # The checkpoints are back on the service: the same agents now judge.
        served = LocalBlobStore(tmp_path / "served", fsync=False)
        for digest in digests:
            served.put(world.store.get(digest))
        duty.step()
        c = market.challenge(claim)
        assert (c.guilty_votes, c.innocent_votes) == (0, 1)
        challenger.step()
        accused = {market.challenge(i).fragment for i in range(claim + 1, market.challenge_count() + 1)}
        assert accused == {lazy, fake}

        # A claim whose data stays out of reach until its deadline: the referee abstains.
        late = market.challenge_training(outsider, world.task_id, 0, honest, 2)
        for digest in digests:
            served.blob_path(digest).unlink()
        with _hidden(world.store, digests):
            duty.step()
            assert late not in duty.decided
            set_next_timestamp(w3, market.challenge(late).deadline + 1)
            duty.step()
            c = market.challenge(late)
            assert (c.guilty_votes, c.innocent_votes) == (0, 0) and late in duty.decided


@pytest.mark.chain
def test_a_poisoned_state_root_alias_does_not_stall_state_sync(
    world: World, tmp_path: Path, witnesses: list[Signer]
) -> None:
    """Issue 10 #5: overwriting a state-root alias used to stall every witness and trainer that
    syncs the state by its root. Candidates that do not recompute the root are skipped."""
    root = world.market.round(world.task_id, 0).state_root
    with _served_copy(world, tmp_path) as (service, ctx):
        _put_anonymously(service.url, world.starts[0].to_bytes(), root)  # a valid state, another root
        _put_anonymously(service.url, b"junk", root)
        assert ctx.fetch_state(root).state_root_hex == root
        ctx.publish_state(world.starts[1], witnesses[0].account)  # a witness's own slot
        for i in range(3 * MAX_ANONYMOUS_CANDIDATES):
            _put_anonymously(service.url, b"junk %d" % i, root)
        state, size = ctx.fetch_state_sized(root)
        assert state.state_root_hex == root and size == len(world.starts[1].to_bytes())
        # The initial state, published anonymously by the sponsor before its root was known: its
        # pinned first candidate outlives anonymous and throwaway-key floods.
        initial = world.ctx.spec.initial_state_root
        attacker = HttpBlobStore(service.url)
        for i in range(2 * MAX_ANONYMOUS_CANDIDATES):
            _put_anonymously(service.url, b"junk %d" % i, initial)
            put_signed(attacker, b"signed junk %d" % i, initial, Account.create())
        assert ctx.fetch_state(initial).state_root_hex == initial.lower()


@pytest.mark.chain
def test_payloads_are_fetched_by_digest_whatever_the_uri_says(world: World, tmp_path: Path) -> None:
    """Issue 10 #1 (off chain): a submission's on-chain ``uri`` is only a hint (an outsider who
    front-runs the commitment chooses it). With every uri dead, the payloads bound by
    ``payloadHash`` are still read by digest from the agent's blob store; a blob store that does not
    have them either leaves them unavailable (a fetch error, never bytes of someone else's choosing)."""
    subs = [world.market.submission(world.task_id, 1, world.fragment(mode)) for mode in MODES]
    with _served_copy(world, tmp_path) as (_service, ctx), _hidden(world.store, [s.payload_hash for s in subs]):
        got = ctx.committed_submissions(1)
        assert [s.fetch_error for s in got] == [None] * 3
        assert all("0x" + keccak(s.payload or b"").hex() == sub.payload_hash for s, sub in zip(got, subs, strict=True))
        for sub in subs:
            LocalBlobStore(tmp_path / "served", fsync=False).blob_path(sub.payload_hash).unlink()
        missing = ctx.committed_submissions(1)
        assert all(s.payload is None and s.fetch_error for s in missing)


# ---------------------------------------------------------------------- the pure core, explicit inputs


def _inputs(world: World, mode: str = "honest", *, round_: int = 1) -> ReplayInputs:
    ctx = world.ctx
    return ReplayInputs(
        adapter=ctx.adapter,
        build_model=ctx.build_model,
        layout=ctx.layout,
        shards=world.shards(mode),
        seed=round_seed(world.task_id, round_, world.fragment(mode)),
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=world.starts[round_],
    )


def _honest_blobs(world: World) -> tuple[Claim, CheckpointManifest, list[bytes]]:
    fragment = world.fragment("honest")
    digest = world.store.resolve(manifest_alias(world.task_id, 1, fragment))
    manifest = CheckpointManifest.from_json(world.store.get(digest or ""))
    blobs = [world.store.get(manifest.digest(i)) for i in range(S + 1)]
    return Claim.of(world.market.submission(world.task_id, 1, fragment)), manifest, blobs


def _commit(blobs: list[bytes], claim: Claim) -> tuple[Claim, CheckpointManifest]:
    """A trainer that commits (consistently) to these checkpoint bytes."""
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(blobs))
    return dataclasses.replace(claim, checkpoint_root=checkpoint_root(hashes)), manifest


@pytest.mark.chain
def test_tampered_checkpoint_bytes_are_caught(world: World) -> None:
    claim, manifest, blobs = _honest_blobs(world)
    inputs = _inputs(world)
    assert find_faulty(claim, manifest.to_json(), lambda m, i: blobs[i], inputs) is None

    # A store serving other bytes than the committed ones: not in hand, so undecided (not guilty).
    tampered = list(blobs)
    tampered[2] = tampered[2][:-1] + bytes([tampered[2][-1] ^ 1])
    outcome = check_segment(2, claim, manifest, lambda m, i: tampered[i], inputs)
    assert isinstance(outcome, Undecided) and "do not match its committed hash" in outcome.reason

    # A trainer that commits to a checkpoint it edited: the segment leading to it fails. (A replay
    # that misses the hash is judged by the envelope, docs/protocol.md §13.6: an edit of a fraction
    # of an AdamW step on one coordinate passes as rounding; one of 0.1, ~17 steps' worth, does not.)
    c2 = Checkpoint.from_bytes(blobs[2], layout=world.ctx.layout)
    for delta, guilty in ((1e-3, False), (0.1, True)):
        params = c2.params.clone()
        params[0] += delta
        edited = list(blobs)
        edited[2] = dataclasses.replace(c2, params=params).to_bytes()
        edited_claim, edited_manifest = _commit(edited, claim)
        found = find_faulty(edited_claim, edited_manifest, lambda m, i, edited=edited: edited[i], inputs)
        if guilty:
            assert found is not None and found.segment == 1 and "exceeds the envelope" in found.reason, found
        else:
            assert found is None

    # A manifest that does not open the committed root, or none at all: the genuine one may be
    # elsewhere, so no verdict; one whose hashes open the root is judged whatever its own fields say.
    assert isinstance(check_segment(0, claim, edited_manifest, lambda m, i: blobs[i], inputs), Undecided)
    assert isinstance(check_segment(0, claim, None, lambda m, i: blobs[i], inputs), Undecided)
    wrong_task = dataclasses.replace(inputs, interval=3)
    assert isinstance(check_segment(0, claim, manifest, lambda m, i: blobs[i], wrong_task), Undecided)
    relabelled = CheckpointManifest(1, 3, manifest.hashes, manifest.uris)  # the genuine hashes, other fields
    assert check_segment(0, claim, relabelled.to_json(), lambda m, i: blobs[i], inputs) == check_segment(
        0, claim, manifest, lambda m, i: blobs[i], inputs
    )
    # Committed bytes that are malformed are the trainer's own: guilty.
    broken = list(blobs)
    broken[1] = b"not a checkpoint"
    broken_claim, broken_manifest = _commit(broken, claim)
    verdict = check_segment(1, broken_claim, broken_manifest, lambda m, i: broken[i], inputs)
    assert isinstance(verdict, Verdict) and verdict.guilty and "malformed" in verdict.reason


@pytest.mark.chain
def test_a_replay_on_any_shard_set_held_during_the_round_is_accepted(world: World) -> None:
    """Shards reassigned while the round was open (another trainer evicted) land under a trainer
    already training on its old ones: a replay on any shard set it held then counts, no other."""
    claim, manifest, blobs = _honest_blobs(world)
    moved = dataclasses.replace(_inputs(world), shards=world.shards("lazy"))  # not what it trained on
    found = find_faulty(claim, manifest, lambda m, i: blobs[i], moved)
    assert found is not None and found.segment == 0 and "does not give checkpoint 1" in found.reason
    held = dataclasses.replace(moved, other_shards=[world.shards("fake-gradient"), world.shards("honest")])
    assert find_faulty(claim, manifest, lambda m, i: blobs[i], held) is None


def test_shard_sets_held_while_the_round_was_open_are_read_from_the_logs() -> None:
    """Log ordering only (a stand-in for the chain's event logs; the anvil-backed tests above read
    real ones): the set held at commit first, then earlier ones back to the round's opening."""

    def event(block: int, index: int, **args: int) -> dict[str, Any]:
        return {"blockNumber": block, "logIndex": index, "args": args}

    logs = {
        "SubmissionCommitted": [event(9, 0)],
        "RoundOpened": [event(5, 3)],
        "ShardsAssigned": [
            event(1, 0, shardMask=0b0001),  # an earlier round
            event(5, 1, shardMask=0b0011),  # held when the round opened
            event(7, 0, shardMask=0b0110),  # reassigned while the round was open
            event(8, 2, shardMask=0b0011),  # ... and back
            event(9, 1, shardMask=0b1000),  # after the commit
        ],
    }
    market = SimpleNamespace(get_logs=lambda name, **filters: logs[name], trainer=None)
    ctx = SimpleNamespace(task_id=1, market=market)
    assert _shard_assignments(ctx, 2, 0, "0xabc") == [[0, 1], [1, 2]]  # type: ignore[arg-type]
    logs["ShardsAssigned"] = [event(1, 0, shardMask=0b0001), event(9, 1, shardMask=0b1000)]
    assert _shard_assignments(ctx, 2, 0, "0xabc") == [[0]]  # type: ignore[arg-type]


@pytest.mark.chain
def test_training_from_another_start_state_is_caught_on_segment_0(world: World) -> None:
    """Checkpoints consistent among themselves, payload derived from the true start state, but the
    training started elsewhere: only c_0 vs the round's start state exposes it."""
    ctx, start = world.ctx, world.starts[1]
    other = TrainingState(start.layout, start.weights + (1 << 24), start.momentum)
    loop = InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, InnerOptimizerConfig(**INNER))
    seed = round_seed(world.task_id, 1, world.fragment("honest"))
    work = loop.run(other, world.shards("honest"), seed=seed, checkpoint_interval=INTERVAL)
    blobs = list(work.checkpoints)
    payload, chunk_root = derive_payload(start, Checkpoint.from_bytes(blobs[-1]), 8)
    claim, manifest = _commit(blobs, Claim(keccak(payload), chunk_root, b""))
    verdict = find_faulty(claim, manifest, lambda m, i: blobs[i], _inputs(world))
    assert verdict is not None and verdict.segment == 0 and "start weights" in verdict.reason


def test_dropout_models_replay_bit_exactly() -> None:
    """GPT-2 trains with dropout: the checkpoints carry the CPU generator state, so a replay
    draws the same dropout masks as the trainer did."""
    gpt2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": SEQ, "vocab_size": 256}
    adapter = LanguageAdapter(seq_len=SEQ)
    model = adapter.build_model({"family": "gpt2", **gpt2}, seed=0)
    assert model.config.resid_pdrop > 0
    layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(model.named_parameters()), layout)
    shards = [_shard(5)]
    work = InnerLoop(adapter, model, layout, InnerOptimizerConfig(**INNER)).run(
        start, shards, seed=3, checkpoint_interval=INTERVAL
    )
    blobs = list(work.checkpoints)
    payload, chunk_root = encode_payload(work.pseudo_gradient, 8)
    claim, manifest = _commit(blobs, Claim(keccak(payload), chunk_root, b""))
    inputs = ReplayInputs(
        adapter=adapter,
        build_model=lambda: adapter.build_model({"family": "gpt2", **gpt2}, seed=0),
        layout=layout,
        shards=shards,
        seed=3,
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=start,
    )
    torch.manual_seed(99)  # the referee's own generator state must not matter
    assert find_faulty(claim, manifest, lambda m, i: blobs[i], inputs) is None


# ---------------------------------------------------------------------- eager checkpoints withheld (issue 26 #6)


def test_withheld_segments_needs_a_failure_after_the_deadline_and_no_success() -> None:
    """The pure rule: an item is withheld iff no try fetched it and a try after the deadline failed."""
    deadline, s = 100, 3
    early = [FetchTry(MANIFEST, 50, True)] + [FetchTry(i, 50, False) for i in range(s + 1)]
    assert withheld_segments(early, segments=s, deadline=deadline) == ()  # our failure before: never evidence
    assert withheld_segments([FetchTry(1, 100, False)], segments=s, deadline=deadline) == ()  # at it: not past
    late = [FetchTry(1, 101, False)]
    # c_1 starts segment 1; segment 0 (c_0 -> c_1) replays exactly against c_1's committed hash
    assert withheld_segments(late, segments=s, deadline=deadline) == (1,)
    assert withheld_segments([FetchTry(3, 101, False)], segments=s, deadline=deadline) == (3,)  # c_S: derivation
    assert withheld_segments([FetchTry(0, 101, False)], segments=s, deadline=deadline) == (0,)
    assert withheld_segments([*late, FetchTry(1, 60, True)], segments=s, deadline=deadline) == ()  # fetched once
    assert withheld_segments([*late, FetchTry(1, 200, True)], segments=s, deadline=deadline) == ()  # published late
    assert withheld_segments([FetchTry(MANIFEST, 101, False)], segments=s, deadline=deadline) == (0, 1, 2, 3)
    assert withheld_segments([], segments=s, deadline=deadline) == ()  # never tried: nothing
    # the claimed segment is one of the withheld ones, the same for every witness
    r, b = keccak(b"state"), keccak(b"block")
    picks = {withheld_claim_segment(1, 2, f, r, b, (0, 1)) for f in range(16)}
    assert picks == {0, 1}
    assert withheld_claim_segment(1, 2, 5, r, b, (2, 3)) == withheld_claim_segment(1, 2, 5, r, b, [3, 2, 3])
    with pytest.raises(ValueError):
        withheld_claim_segment(1, 2, 5, r, b, ())
    # docs/protocol.md §14's worked example: task 1, round 2, R = keccak("state"), B = keccak("block")
    assert [withheld_claim_segment(1, 2, f, r, b, (0, 1, 2, 3)) for f in range(6)] == [1, 1, 0, 2, 0, 2]
    assert [withheld_claim_segment(1, 2, f, r, b, (0, 1)) for f in range(6)] == [1, 1, 0, 0, 0, 0]


@pytest.mark.chain
def test_withheld_eager_checkpoints_are_claimed_once_and_only_silence_convicts(
    tmp_path: Path,
    w3: Web3,
    session_market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Any,
) -> None:
    """Issue 26 #6: in an eager task two trainers commit checkpoint roots and upload no checkpoint.
    The witnesses' challengers used to log ``training_check_undecided`` round after round and file
    nothing. Now, before the availability deadline (half a challenge window after the close) their
    failure to fetch is no evidence (no claim); after it, the first challenger files exactly one
    claim per withheld submission, the second finds it on chain and files none, and neither files
    again on later ticks. The trainer that answers by uploading the claimed segment is refereed
    innocent and keeps its stake; the silent one is convicted when its response window ends. The
    honest trainer is never claimed."""
    market = session_market
    modes = ("honest", "withhold", "upload-on-claim")
    store = LocalBlobStore(tmp_path / "blobs", fsync=False)
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model({"family": "llama", **MODEL}, seed=0)
    layout = ParameterLayout.from_state_dict(dict(net.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(net.named_parameters()), layout)
    store.put(start.to_bytes(), alias=start.state_root_hex)
    shards = [store.put(_shard(i)) for i in range(3)]
    tokenizer = store.put(b"{}")
    with chain_snapshot_ctx(w3):
        spec: TrainingTaskSpec = spec_factory(
            model=ModelArchitecture(family="llama", config=MODEL),
            dataset=DatasetManifest(
                shard_hashes=tuple(r.digest for r in shards), shard_uris=tuple(r.uri for r in shards)
            ),
            inner_steps=H,
            checkpoint_interval=INTERVAL,
            param_count=layout.numel,
            initial_state_root=start.state_root_hex,
            min_trainers=3,
            max_trainers=3,
            rounds=1,  # the trainers' next tick answers claims and trains nothing more
            round_duration_s=600,
            gradient_bits=8,
            metadata={"tokenizer": {"digest": tokenizer.digest, "uri": tokenizer.uri}, "seq_len": SEQ},
        )
        assert not spec.verification_policy.on_demand
        task_id, _ = market.post_task(sponsor, spec, store.put(spec.canonical_bytes()).uri)
        agents = {
            mode: _agent(mode, signer, task_id, tmp_path, market, store)
            for mode, signer in zip(modes, trainers, strict=True)
        }
        for agent in agents.values():
            agent.step()  # enroll
        for agent in agents.values():
            agent.step()  # train round 0 and commit
        for agent in agents.values():
            agent._reveal()  # the last commit closed round 0's commit phase: reveal (§10.6)
        ctx = TaskContext.load(market, store, task_id)
        result = ctx.compute_round(start, ctx.committed_submissions(0))
        assert result.accepted_mask == 0b111
        ctx.publish_state(result.state)
        set_next_timestamp(w3, market.round_deadline(task_id) + 1)
        for witness in witnesses:
            market.ensure_witness_bonded(witness, task_id)
        for witness in witnesses[: spec.threshold]:
            market.finalize_round(witness, task_id, 0, result.state_root, result.aggregate_root, result.accepted_mask)
        rr = market.round(task_id, 0)
        assert rr.status == RoundStatus.FINALIZED
        fragment = {mode: market.trainer(task_id, a.signer.address).fragment for mode, a in agents.items()}
        addresses = {mode: a.signer.address.lower() for mode, a in agents.items()}
        manifests = {
            mode: CheckpointManifest.from_json(store.get(store.resolve(manifest_alias(task_id, 0, f)) or ""))
            for mode, f in fragment.items()
        }
        for mode in ("withhold", "upload-on-claim"):  # committed, never uploaded (c_0 is the shared start)
            assert not any(store.has(manifests[mode].digest(i)) for i in range(1, S + 1))

        challengers = [
            Challenger(
                task_id=task_id,
                signer=w,
                market=market,
                blobs=store,
                training_checker=make_training_checker("spot", seed=int(w.address, 16)),
                withdraw=False,
                ctx=TaskContext.load(market, store, task_id),
            )
            for w in witnesses[:2]
        ]
        before = market.challenge_count()
        for challenger in challengers:
            challenger.step()  # before the availability deadline: our failure is no evidence
        assert market.challenge_count() == before
        assert 0 not in challengers[0].audited  # audited again

        set_next_timestamp(w3, spot_check_deadline(rr.closed_at, spec.challenge_window_s) + 1)
        for _ in range(2):  # two ticks each: remembered, and the chain is read before filing
            for challenger in challengers:
                challenger.step()
        claims = [market.challenge(i) for i in range(before + 1, market.challenge_count() + 1)]
        assert sorted(c.accused.lower() for c in claims) == sorted(addresses[m] for m in modes[1:])
        assert {c.challenger.lower() for c in claims} == {witnesses[0].address.lower()}
        by_mode = {mode: next(c for c in claims if c.accused.lower() == addresses[mode]) for mode in modes[1:]}
        for mode, c in by_mode.items():
            assert (c.round, c.fragment) == (0, fragment[mode])
            block_hash = market.finalization_block_hash(task_id, 0)
            assert block_hash is not None
            expected = withheld_claim_segment(
                task_id, 0, fragment[mode], bytes.fromhex(rr.state_root[2:]), block_hash, range(1, S + 1)
            )  # c_0 (the shared start) is published: segment 0 replays exactly and is not withheld
            assert c.segment == expected

        # The accused answer: one publishes the claimed segment's checkpoints, the other stays silent.
        for agent in agents.values():
            agent.step()
        assert market.availability_demand(by_mode["upload-on-claim"].challenge_id).answered
        assert not market.availability_demand(by_mode["withhold"].challenge_id).answered
        answered = by_mode["upload-on-claim"]
        assert all(
            store.has(manifests["upload-on-claim"].digest(i)) for i in checkpoints_for_segment(answered.segment, S)
        )
        for witness in witnesses:
            RefereeDuty(TaskContext.load(market, store, task_id), witness).step()
        assert market.challenge(answered.challenge_id).status == ChallengeStatus.REJECTED

        set_next_timestamp(w3, market.availability_demand(by_mode["withhold"].challenge_id).deadline + 1)
        challengers[0].step()  # follows up its claim: the silent trainer is convicted
        assert market.challenge(by_mode["withhold"].challenge_id).status == ChallengeStatus.UPHELD
        assert market.trainer(task_id, addresses["withhold"]).evicted
        assert market.trainer(task_id, addresses["withhold"]).slashed_wei > 0
        for mode in ("honest", "upload-on-claim"):
            assert market.trainer(task_id, addresses[mode]).slashed_wei == 0
            assert not market.trainer(task_id, addresses[mode]).evicted
        assert market.challenge_count() == before + 2
