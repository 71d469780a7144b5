"""Training-fraud proofs: refereed re-execution of one segment of a trainer's inner loop.

Trainers here are the real ``TrainerAgent`` (its ``_train_and_commit``: training with checkpoint
capture, payload, checkpoint blobs and manifest published to a real ``LocalBlobStore``) in front
of a small in-memory market double that records commitments; the referee reads them back through
a real ``TaskContext`` (``referee_segment`` / ``find_faulty_segment``). No chain is needed: what
the referee reads from it is the submission (payload hash, chunk root, checkpoint root), the
round's start state root and the trainer's shards.

Model: a 1-layer Llama (hidden 32, vocab 256, ~18k parameters) on synthetic token shards,
H = 6 AdamW steps per round, a checkpoint every 2 steps (S = 3 training segments + derivation).
Each trainer trains round 0 (no checkpoints needed for it here) and round 1, so c_0 of round 1
holds AdamW state carried over from round 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from eth_account import Account
from eth_utils import keccak

from conftest import OFFLINE_DEADLINE, OFFLINE_WITNESSES, build_spec
from syncline.blobstore import LocalBlobStore
from syncline.chain.keys import Signer
from syncline.chain.market import MarketClient
from syncline.modality.language import LanguageAdapter
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointManifest,
    checkpoint_hash,
    checkpoint_root,
    interval_of,
    manifest_alias,
    segment_count,
)
from syncline.protocol.enums import TaskStatus
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.signed_messages import Commitment, Domain, sign
from syncline.protocol.spec import DatasetManifest, ModelArchitecture, TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig, config_from_mapping
from syncline.run.context import TaskContext
from syncline.trainer.agent import ZERO_ADDRESS, TrainerAgent, round_seed
from syncline.trainer.inner_loop import InnerLoop
from syncline.trainer.referee import (
    Claim,
    RefereeError,
    ReplayInputs,
    Verdict,
    check_segment,
    find_faulty,
    find_faulty_segment,
    referee_segment,
)
from syncline.trainer.segments import derive_payload, encode_payload

TASK = 7
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
FRAGMENTS = {"honest": 0, "lazy": 1, "fake-gradient": 2}


def _spec(family: str = "llama", model: dict[str, Any] | None = None) -> TrainingTaskSpec:
    extra: dict[str, Any] = {}
    if "checkpoint_interval" in {f.name for f in fields(TrainingTaskSpec)}:
        extra["checkpoint_interval"] = INTERVAL
    spec = build_spec(
        witnesses=OFFLINE_WITNESSES,
        enrollment_deadline=OFFLINE_DEADLINE,
        shards=3,
        model=ModelArchitecture(family=family, config=model or MODEL),
        inner_steps=H,
        gradient_bits=8,
        **extra,
    )
    return spec


class FakeMarket:
    """What the trainer writes and the referee reads, without a chain."""

    w3 = SimpleNamespace(eth=SimpleNamespace(get_block=lambda tag: {"timestamp": 0}))

    def __init__(self, start_root: str):
        self.start_root = start_root
        self.subs: dict[tuple[int, int, int], SimpleNamespace] = {}
        self.shards: dict[str, list[int]] = {}

    def commit_submission(
        self,
        signer: Any,
        task_id: int,
        round_: int,
        fragment: int,
        payload_hash: bytes,
        chunk_root: bytes,
        uri: str,
        *,
        checkpoint_root: bytes,
    ) -> None:
        self.subs[(task_id, round_, fragment)] = SimpleNamespace(
            trainer=signer.address,
            weight=1,
            committed_at=0,
            payload_hash="0x" + payload_hash.hex(),
            chunk_root="0x" + chunk_root.hex(),
            checkpoint_root="0x" + checkpoint_root.hex(),
            uri=uri,
        )

    def sign_commitment(
        self,
        signer: Any,
        task_id: int,
        round_: int,
        fragment: int,
        payload_hash: bytes,
        chunk_root: bytes,
        checkpoint_root: bytes,
    ) -> tuple[Commitment, bytes]:
        message = Commitment(task_id, round_, fragment, payload_hash, chunk_root, checkpoint_root)
        # The fake chain checks no signature; any key gives the trainer a well-formed one.
        return message, sign(Account.from_key("0x" + "77" * 32), Domain(31337, "0x" + "22" * 20), message)

    def send_commitment(self, relayer: Any, message: Commitment, uri: str, signature: bytes) -> None:
        self.commit_submission(
            relayer,
            message.task_id,
            message.round,
            message.fragment,
            message.payload_hash,
            message.chunk_root,
            uri,
            checkpoint_root=message.checkpoint_root,
        )

    def submission(self, task_id: int, round_: int, fragment: int) -> SimpleNamespace:
        zero = "0x" + "00" * 32
        return self.subs.get(
            (task_id, round_, fragment), SimpleNamespace(trainer=ZERO_ADDRESS, payload_hash=zero, chunk_root=zero)
        )

    def round(self, task_id: int, round_: int) -> SimpleNamespace:
        # Every round starts from the initial state here (as after carry-forwards).
        return SimpleNamespace(prev_state_root=self.start_root, state_root=self.start_root, closed_at=1)

    def trainer(self, task_id: int, address: str) -> SimpleNamespace:
        return SimpleNamespace(shards=self.shards[address])

    def get_logs(self, name: str, **filters: Any) -> list[Any]:
        return []


@dataclass
class World:
    ctx: TaskContext
    market: FakeMarket
    store: LocalBlobStore
    start: TrainingState
    shards: dict[int, bytes]
    agents: dict[str, TrainerAgent]


def _shard(seed: int, tokens: int = 3000) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, tokens).astype("<u2").tobytes()


def _agent(mode: str, world_dir: Path, ctx: TaskContext, market: FakeMarket, store: LocalBlobStore) -> TrainerAgent:
    cfg = config_from_mapping(
        {
            "node_rpc": "http://127.0.0.1:1",
            "task_id": TASK,
            "deployment": str(world_dir / "deployment.json"),
            "blob_store": str(world_dir / "blobs"),
            "state_dir": str(world_dir / mode),
            "misbehave": None if mode == "honest" else mode,
            "inner": INNER,
        }
    )
    address = "0x" + f"{FRAGMENTS[mode] + 1:040x}"
    market.shards[address] = [FRAGMENTS[mode]]
    return TrainerAgent(cfg=cfg, signer=SimpleNamespace(address=address), market=market, blobs=store, ctx=ctx)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("referee")
    spec = _spec()
    adapter = LanguageAdapter(seq_len=SEQ)
    ctx0 = {"family": "llama", **MODEL}
    model = adapter.build_model(ctx0, seed=0)
    layout = ParameterLayout.from_state_dict(dict(model.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(model.named_parameters()), layout)
    store = LocalBlobStore(root / "blobs", fsync=False)
    market = FakeMarket(start.state_root_hex)
    shards = {i: _shard(i) for i in range(3)}
    ctx = TaskContext(
        task_id=TASK,
        market=market,  # type: ignore[arg-type]
        blobs=store,
        spec=spec,
        spec_uri="",
        adapter=adapter,
        layout=layout,
        tokenizer_json="",
        _shards=dict(shards),
    )
    ctx.publish_state(start)
    agents = {mode: _agent(mode, root, ctx, market, store) for mode in FRAGMENTS}
    torch.manual_seed(1234)  # the fake gradient's noise
    for mode, agent in agents.items():
        agent._state = start
        for round_ in (0, 1):
            agent._train_and_commit(round_, FRAGMENTS[mode], [FRAGMENTS[mode]], start.state_root_hex, 10**9)
    yield World(ctx, market, store, start, shards, agents)


def _verdicts(world: World, round_: int, fragment: int) -> list[Verdict]:
    return [referee_segment(world.ctx, round_, fragment, s) for s in range(S + 1)]


# ---------------------------------------------------------------------- through the agent and TaskContext


def test_honest_trainer_is_innocent_on_every_segment(world: World) -> None:
    assert interval_of(world.ctx.spec) == INTERVAL, "the spec must carry checkpoint_interval"
    for round_ in (0, 1):
        verdicts = _verdicts(world, round_, FRAGMENTS["honest"])
        assert [v.guilty for v in verdicts] == [False] * (S + 1), [v.reason for v in verdicts]
        assert verdicts[-1].derivation and not verdicts[0].derivation
        assert find_faulty_segment(world.ctx, round_, FRAGMENTS["honest"]) is None


def test_capturing_checkpoints_does_not_change_training(world: World) -> None:
    """The honest agent's committed payload equals that of a plain run without checkpoints."""
    ctx = world.ctx
    loop = InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, InnerOptimizerConfig(**INNER))
    fragment = FRAGMENTS["honest"]
    for round_ in (0, 1):
        work = loop.run(world.start, [world.shards[fragment]], seed=round_seed(TASK, round_, fragment))
        assert work.checkpoints == ()
        payload, chunk_root = encode_payload(work.pseudo_gradient, 8)
        sub = world.market.submission(TASK, round_, fragment)
        assert sub.payload_hash == "0x" + keccak(payload).hex()
        assert sub.chunk_root == "0x" + chunk_root.hex()


def test_published_checkpoints_and_manifest(world: World) -> None:
    fragment = FRAGMENTS["honest"]
    sub = world.market.submission(TASK, 1, fragment)
    digest = world.store.resolve(manifest_alias(TASK, 1, fragment))
    assert digest is not None
    manifest = CheckpointManifest.from_json(world.store.get(digest))
    manifest.verify_against(sub.checkpoint_root)
    assert (manifest.interval, manifest.inner_steps, manifest.segments) == (INTERVAL, H, S)
    blobs = [world.store.get(manifest.digest(i)) for i in range(S + 1)]
    numel = world.ctx.layout.numel
    for i, data in enumerate(blobs):
        ckpt = Checkpoint.from_bytes(data, layout=world.ctx.layout)
        assert ckpt.step == min(i * INTERVAL, H)
        assert 12 * numel < len(data) < 12 * numel + 8192  # 12 bytes per parameter + header + RNG state
    c0 = Checkpoint.from_bytes(blobs[0], layout=world.ctx.layout)
    assert set(c0.adam_steps) == {H}, "round 1 starts with the AdamW state carried from round 0"


def test_lazy_trainer_is_caught_on_a_training_segment(world: World) -> None:
    fragment = FRAGMENTS["lazy"]
    verdicts = _verdicts(world, 1, fragment)
    # It trained steps 0..2 of 6 and padded c_2, c_3 with that state: segment 0 (steps 0-1) is
    # real; re-running segments 1 and 2 exposes the padding; its payload is derived from c_3.
    assert [v.guilty for v in verdicts] == [False, True, True, False], [v.reason for v in verdicts]
    assert "does not give checkpoint 2" in verdicts[1].reason
    found = find_faulty_segment(world.ctx, 1, fragment)
    assert found is not None and found.segment == 1 and found.guilty


def test_fake_gradient_is_caught_on_the_derivation_segment(world: World) -> None:
    fragment = FRAGMENTS["fake-gradient"]
    verdicts = _verdicts(world, 1, fragment)
    assert [v.guilty for v in verdicts] == [False] * S + [True], [v.reason for v in verdicts]
    found = find_faulty_segment(world.ctx, 1, fragment)
    assert found is not None and found.derivation and "payload" in found.reason


def test_corrupt_or_missing_blobs_make_the_trainer_guilty(world: World, tmp_path: Path) -> None:
    """An honest trainer publishing to its own store, where its c_1 then rots, then vanishes."""
    store = LocalBlobStore(tmp_path / "blobs", fsync=False)
    market = FakeMarket(world.start.state_root_hex)
    ctx = dataclasses.replace(world.ctx, blobs=store, market=market)
    ctx.publish_state(world.start)
    agent = _agent("honest", tmp_path, ctx, market, store)
    agent._state = world.start
    fragment = FRAGMENTS["honest"]
    for round_ in (0, 1):
        agent._train_and_commit(round_, fragment, [fragment], world.start.state_root_hex, 10**9)
    assert find_faulty_segment(ctx, 1, fragment) is None
    manifest = CheckpointManifest.from_json(store.get(store.resolve(manifest_alias(TASK, 1, fragment)) or ""))
    path = store.blob_path(manifest.digest(1))
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    verdict = referee_segment(ctx, 1, fragment, 1)
    assert verdict.guilty and "checkpoint 1 is unavailable" in verdict.reason
    assert not referee_segment(ctx, 1, fragment, 0).guilty  # c_0 and the hash of c_1 suffice
    path.unlink(missing_ok=True)
    assert referee_segment(ctx, 1, fragment, 1).guilty
    # The manifest gone from both aliases: every segment is guilty.
    for alias in store.aliases_dir.glob("checkpoints:*"):
        alias.unlink()
    verdict = referee_segment(ctx, 1, fragment, 2)
    assert verdict.guilty and "manifest" in verdict.reason


def test_segment_out_of_range_and_missing_submission(world: World) -> None:
    with pytest.raises(RefereeError):
        referee_segment(world.ctx, 1, FRAGMENTS["honest"], S + 1)
    with pytest.raises(RefereeError, match="no submission"):
        referee_segment(world.ctx, 1, 9, 0)


# ---------------------------------------------------------------------- the pure core, explicit inputs


def _inputs(world: World, fragment: int, *, round_: int = 1) -> ReplayInputs:
    ctx = world.ctx
    return ReplayInputs(
        adapter=ctx.adapter,
        build_model=ctx.build_model,
        layout=ctx.layout,
        shards=[world.shards[fragment]],
        seed=round_seed(TASK, round_, fragment),
        inner_steps=H,
        interval=INTERVAL,
        gradient_bits=8,
        start_state=world.start,
    )


def _honest_blobs(world: World) -> tuple[Claim, CheckpointManifest, list[bytes]]:
    fragment = FRAGMENTS["honest"]
    sub = world.market.submission(TASK, 1, fragment)
    digest = world.store.resolve(manifest_alias(TASK, 1, fragment))
    manifest = CheckpointManifest.from_json(world.store.get(digest or ""))
    blobs = [world.store.get(manifest.digest(i)) for i in range(S + 1)]
    claim = Claim(
        bytes.fromhex(sub.payload_hash[2:]), bytes.fromhex(sub.chunk_root[2:]), bytes.fromhex(sub.checkpoint_root[2:])
    )
    return claim, manifest, blobs


def _commit(blobs: list[bytes], claim: Claim) -> tuple[Claim, CheckpointManifest]:
    """A trainer that commits (consistently) to these checkpoint bytes."""
    hashes = tuple(checkpoint_hash(b) for b in blobs)
    manifest = CheckpointManifest(INTERVAL, H, hashes, ("",) * len(blobs))
    return dataclasses.replace(claim, checkpoint_root=checkpoint_root(hashes)), manifest


def test_tampered_checkpoint_bytes_are_caught(world: World) -> None:
    claim, manifest, blobs = _honest_blobs(world)
    inputs = _inputs(world, FRAGMENTS["honest"])
    assert find_faulty(claim, manifest.to_json(), lambda m, i: blobs[i], inputs) is None

    # A store (or a trainer) serving other bytes than the committed ones.
    tampered = list(blobs)
    tampered[2] = tampered[2][:-1] + bytes([tampered[2][-1] ^ 1])
    verdict = check_segment(2, claim, manifest, lambda m, i: tampered[i], inputs)
    assert verdict.guilty and "does not match its committed hash" in verdict.reason

    # A trainer that commits to a checkpoint it edited: the segment leading to it fails.
    c2 = Checkpoint.from_bytes(blobs[2], layout=world.ctx.layout)
    params = c2.params.clone()
    params[0] += 1e-3
    edited = list(blobs)
    edited[2] = dataclasses.replace(c2, params=params).to_bytes()
    edited_claim, edited_manifest = _commit(edited, claim)
    found = find_faulty(edited_claim, edited_manifest, lambda m, i: edited[i], inputs)
    assert found is not None and found.segment == 1

    # A manifest that does not open the committed root, or none at all.
    assert check_segment(0, claim, edited_manifest, lambda m, i: blobs[i], inputs).guilty
    assert check_segment(0, claim, None, lambda m, i: blobs[i], inputs).guilty
    wrong_task = dataclasses.replace(inputs, interval=3)
    assert check_segment(0, claim, manifest, lambda m, i: blobs[i], wrong_task).guilty


def test_training_from_another_start_state_is_caught_on_segment_0(world: World) -> None:
    """Checkpoints consistent among themselves, payload derived from the true start state, but the
    training started elsewhere: only c_0 vs the round's start state exposes it."""
    ctx = world.ctx
    fragment = FRAGMENTS["honest"]
    other = TrainingState(world.start.layout, world.start.weights + (1 << 24), world.start.momentum)
    loop = InnerLoop(ctx.adapter, ctx.build_model(), ctx.layout, InnerOptimizerConfig(**INNER))
    work = loop.run(other, [world.shards[fragment]], seed=round_seed(TASK, 1, fragment), checkpoint_interval=INTERVAL)
    blobs = list(work.checkpoints)
    payload, chunk_root = derive_payload(world.start, Checkpoint.from_bytes(blobs[-1]), 8)
    claim, manifest = _commit(blobs, Claim(keccak(payload), chunk_root, b""))
    verdict = find_faulty(claim, manifest, lambda m, i: blobs[i], _inputs(world, fragment))
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


# ---------------------------------------------------------------------- on anvil


@pytest.mark.chain
def test_submissions_on_chain_are_refereed(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    spec_factory: Any,
    tmp_path: Path,
) -> None:
    """The real contract and client: three in-process trainer agents (honest, lazy, fake-gradient)
    enroll and commit round 0 with their checkpoint roots; the referee reads everything back
    through ``TaskContext.load`` (spec hash, ``checkpoint_root``, shard assignment from the logs)."""
    store = LocalBlobStore(tmp_path / "blobs", fsync=False)
    adapter = LanguageAdapter(seq_len=SEQ)
    net = adapter.build_model({"family": "llama", **MODEL}, seed=0)
    layout = ParameterLayout.from_state_dict(dict(net.named_parameters()))
    start = TrainingState.from_model_state_dict(dict(net.named_parameters()), layout)
    store.put(start.to_bytes(), alias=start.state_root_hex)
    shards = [store.put(_shard(10 + i)) for i in range(3)]
    tokenizer = store.put(b"{}")  # TaskContext only pins it; this task never tokenizes text
    spec = spec_factory(
        model=ModelArchitecture(family="llama", config=MODEL),
        dataset=DatasetManifest(shard_hashes=tuple(r.digest for r in shards), shard_uris=tuple(r.uri for r in shards)),
        inner_steps=H,
        checkpoint_interval=INTERVAL,
        param_count=layout.numel,
        initial_state_root=start.state_root_hex,
        min_trainers=3,
        max_trainers=3,
        round_duration_s=600,
        metadata={"tokenizer": {"digest": tokenizer.digest, "uri": tokenizer.uri}, "seq_len": SEQ},
    )
    task_id, _ = market.post_task(sponsor, spec, store.put(spec.canonical_bytes()).uri)
    agents = {}
    for mode, signer in zip(FRAGMENTS, trainers, strict=True):
        cfg = config_from_mapping(
            {
                "node_rpc": "http://127.0.0.1:1",
                "task_id": task_id,
                "deployment": str(tmp_path / "deployment.json"),
                "blob_store": str(tmp_path / "blobs"),
                "state_dir": str(tmp_path / mode),
                "misbehave": None if mode == "honest" else mode,
                "inner": INNER,
            }
        )
        agents[mode] = TrainerAgent(cfg=cfg, signer=signer, market=market, blobs=store)
        agents[mode].step()  # enroll; the third enrollment starts the run
    assert market.task(task_id).status == TaskStatus.RUNNING
    torch.manual_seed(4321)
    for agent in agents.values():
        agent.step()  # train round 0 and commit
    ctx = TaskContext.load(market, store, task_id)
    fragment = {mode: market.trainer(task_id, a.signer.address).fragment for mode, a in agents.items()}
    for f in fragment.values():
        assert market.submission(task_id, 0, f).checkpoint_root != "0x" + "00" * 32
    assert find_faulty_segment(ctx, 0, fragment["honest"]) is None
    lazy = find_faulty_segment(ctx, 0, fragment["lazy"])
    assert lazy is not None and lazy.segment == 1
    fake = find_faulty_segment(ctx, 0, fragment["fake-gradient"])
    assert fake is not None and fake.derivation
