"""Shared fixtures: one real anvil devnet per session, the market deployed once, and an
``evm_snapshot``/``evm_revert`` pair around every chain test so tests stay isolated and fast.

Accounts (anvil development keys, read from anvil's ``--config-out`` file):
    0 sponsor (also the deployer), 1..3 trainers, 4..6 witnesses, 7 outsider.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import settings

try:  # the repo venv installs syncline editable; a bare venv needs agents/ on the path
    import syncline  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))

from eth_utils import keccak, to_checksum_address
from web3 import Web3

from syncline.chain import devnet as devnet_mod
from syncline.chain.deployment import Deployment, deploy_market
from syncline.chain.devnet import Devnet, start_anvil
from syncline.chain.keys import Signer, from_private_key
from syncline.chain.market import MarketClient
from syncline.errors import ChainError
from syncline.protocol.enums import AggregationRule, Modality, RoundStatus, Tier
from syncline.protocol.spec import (
    AggregationSpec,
    DatasetManifest,
    ModelArchitecture,
    OuterOptimizerSpec,
    TrainingTaskSpec,
)

# No example database on disk (keeps the working tree clean); no per-example deadline because
# chain round trips vary with machine load.
settings.register_profile("syncline", database=None, deadline=None)
settings.load_profile("syncline")

ETH = 10**18
T = TypeVar("T")
SPEC_URI = "ipfs://bafy-syncline-test-spec"


# ---------------------------------------------------------------------- pure helpers


def h32(text: str) -> str:
    """A deterministic non-zero bytes32 as 0x-hex."""
    return "0x" + keccak(text=text).hex()


def checkpoint_root(label: str) -> str:
    """A placeholder checkpoint root (non-zero bytes32) for commitments made by tests.

    The trainer agent commits the real Merkle root over its inner-loop checkpoint hashes; chain
    tests only need a distinct non-zero value per commitment.
    """
    return h32(f"checkpoints/{label}")


def bond_witnesses(market: MarketClient, task_id: int, witnesses: list[Signer]) -> list[Any]:
    """Every witness posts the task's witness bond (needed before voting); returns the receipts."""
    return [market.bond_witness(w, task_id) for w in witnesses]


def start_task(
    market: MarketClient, sponsor: Signer, spec: TrainingTaskSpec, witnesses: list[Signer], trainers: list[Signer]
) -> tuple[int, list[Any]]:
    """Post ``spec``, bond every witness and enroll every trainer (fragments in list order; the run
    starts once ``max_trainers`` have enrolled). Returns the task id and every receipt."""
    task_id, receipt = market.post_task(sponsor, spec, SPEC_URI)
    receipts = [receipt, *bond_witnesses(market, task_id, witnesses)]
    receipts += [market.enroll(t, task_id)[1] for t in trainers]
    return task_id, receipts


def commit(market: MarketClient, trainer: Signer, task_id: int, round_: int, fragment: int, tag: str = "") -> Any:
    """Commit a stand-in submission: distinct placeholder hashes per (task, round, fragment, tag)."""
    label = f"{task_id}/{round_}/{fragment}{tag}"
    return market.commit_submission(
        trainer,
        task_id,
        round_,
        fragment,
        h32(f"payload/{label}"),
        h32(f"chunks/{label}"),
        f"ipfs://g/{label}",
        checkpoint_root=checkpoint_root(label),
    )


def travel_past(w3: Web3, timestamp: int) -> None:
    """Mine a block after ``timestamp`` (at ``timestamp + 1``, or one second on if the chain is already later)."""
    devnet_mod.set_next_timestamp(w3, max(timestamp + 1, devnet_mod.chain_time(w3) + 1))


def finalize(
    market: MarketClient,
    w3: Web3,
    voters: list[Signer],
    task_id: int,
    rnd: int,
    mask: int,
    tag: str = "",
    metrics: Sequence[int] = (),
) -> tuple[str, str]:
    """Pass the round deadline and have ``voters`` vote the same result (voter ``i`` reporting
    ``metrics[i]``, default 0); the round is finalized. Returns (state, aggregate)."""
    travel_past(w3, market.round_deadline(task_id))
    state, aggregate = h32(f"state/{task_id}/{rnd}{tag}"), h32(f"aggregate/{task_id}/{rnd}{tag}")
    for i, w in enumerate(voters):
        market.finalize_round(w, task_id, rnd, state, aggregate, mask, metric=metrics[i] if metrics else 0)
    assert market.round(task_id, rnd).status == RoundStatus.FINALIZED
    return state, aggregate


def check_error(err: ChainError, name: str, args: dict[str, Any]) -> None:
    """``err`` is one decoded line naming the custom error ``name`` and exactly its values ``args``
    (addresses compared case-insensitively)."""
    assert err.error_name == name, str(err)
    assert _lowered(err.error_args) == _lowered(args), str(err)
    assert "\n" not in str(err)
    rendered = ", ".join(f"{k}={v}" for k, v in err.error_args.items())
    assert f"{name}({rendered})" in str(err)


def _lowered(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v.lower() if isinstance(v, str) else v for k, v in args.items()}


def shard_mask(shard_count: int, active: int, position: int) -> int:
    """Python mirror of ShardAssignment.maskFor (contiguous range [p*S/n, (p+1)*S/n))."""
    start = position * shard_count // active
    end = (position + 1) * shard_count // active
    return (1 << end) - (1 << start)


def build_spec(
    *,
    witnesses: tuple[str, ...],
    enrollment_deadline: int,
    shards: int = 6,
    **overrides: Any,
) -> TrainingTaskSpec:
    """The default valid spec of the suite; keyword overrides replace fields."""
    spec = TrainingTaskSpec(
        name="syncline-test-tiny-lm",
        modality=Modality.LANGUAGE,
        model=ModelArchitecture(family="gpt2", config={"n_layer": 2, "n_embd": 64, "vocab_size": 256}),
        dataset=DatasetManifest(shard_hashes=tuple(h32(f"shard-{i}") for i in range(shards))),
        tier=Tier.VERIFIED,
        aggregation=AggregationSpec(rule=AggregationRule.COORDINATE_MEDIAN),
        inner_steps=50,
        rounds=4,
        round_duration_s=300,
        grace_window_s=120,
        challenge_window_s=600,
        trainer_stake_wei=1 * ETH,
        min_trainers=2,
        max_trainers=3,
        enrollment_deadline=enrollment_deadline,
        witnesses=tuple(witnesses),
        threshold=2,
        witness_fee_wei=ETH // 100,
        reward_pool_wei=3 * ETH,
        initial_state_root=h32("initial-state"),
        outer_optimizer=OuterOptimizerSpec(lr=0.7, momentum=0.9),
        gradient_bits=8,
        max_missed_rounds=1,
        eviction_slash_bps=2500,
        param_count=4 * 256,
        checkpoint_interval=10,
        witness_bond_wei=ETH // 2,
        challenge_bond_wei=ETH // 10,
    )
    spec = spec.with_updates(**overrides) if overrides else spec
    if "trainer_stake_wei" not in overrides:
        # postTask's deterrence rule: at least 2R (R = reward_pool / (rounds x min_trainers)), so
        # every shape a test asks for posts at its derived rate (1 ETH at the default shape)
        spec = spec.with_updates(trainer_stake_wei=max(spec.trainer_stake_wei, 2 * spec.reward_per_submission_wei))
    return spec


OFFLINE_WITNESSES = tuple(to_checksum_address("0x" + keccak(text=f"offline-witness-{i}").hex()[-40:]) for i in range(3))
OFFLINE_DEADLINE = 2_000_000_000


class GasMeter:
    """Wei each account spent on gas, summed from the receipts of its transactions."""

    def __init__(self) -> None:
        self.spent: dict[str, int] = defaultdict(int)
        self.count: dict[str, int] = defaultdict(int)

    def add(self, receipt: Any) -> Any:
        assert receipt["status"] == 1
        sender = Web3.to_checksum_address(receipt["from"])
        self.spent[sender] += int(receipt["gasUsed"]) * int(receipt["effectiveGasPrice"])
        self.count[sender] += 1
        return receipt

    def of(self, signer: Signer) -> int:
        return self.spent[signer.address]


# ---------------------------------------------------------------------- session: one devnet


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    net = start_anvil(tmp_path_factory.mktemp("anvil"))
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture(scope="session")
def w3(devnet: Devnet) -> Web3:
    return devnet.web3()


@pytest.fixture(scope="session")
def accounts(devnet: Devnet) -> list[Signer]:
    return [from_private_key(k) for k in devnet.private_keys()]


@pytest.fixture(scope="session")
def sponsor(accounts: list[Signer]) -> Signer:
    return accounts[0]


@pytest.fixture(scope="session")
def trainers(accounts: list[Signer]) -> list[Signer]:
    return accounts[1:4]


@pytest.fixture(scope="session")
def witnesses(accounts: list[Signer]) -> list[Signer]:
    return accounts[4:7]


@pytest.fixture(scope="session")
def outsider(accounts: list[Signer]) -> Signer:
    return accounts[7]


@pytest.fixture(scope="session")
def deployment(devnet: Devnet, w3: Web3, sponsor: Signer, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    return deploy_market(w3, sponsor, devnet.rpc_url, tmp_path_factory.mktemp("deployment"))


@pytest.fixture(scope="session")
def session_market(deployment: Deployment, w3: Web3) -> MarketClient:
    return MarketClient.from_deployment(deployment, w3)


@contextmanager
def chain_snapshot_ctx(w3: Web3) -> Iterator[str]:
    """Everything done inside is undone on exit (state, balances, nonces and the clock).

    A block is mined first: a revert sets the chain back to the snapshot's last block, whose
    timestamp falls further behind the wall clock (the next block's time) the longer the session
    runs, so a test that counts a deadline from ``chain_time`` would find it already past."""
    w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    snap = devnet_mod.snapshot(w3)
    try:
        yield snap
    finally:
        devnet_mod.revert(w3, snap)


@pytest.fixture
def chain_snapshot(w3: Web3) -> Iterator[str]:
    with chain_snapshot_ctx(w3) as snap:
        yield snap


@pytest.fixture
def market(session_market: MarketClient, chain_snapshot: str) -> MarketClient:
    """The session's market client, with the chain reverted after the test."""
    return session_market


@pytest.fixture
def running_task(
    market: MarketClient,
    sponsor: Signer,
    trainers: list[Signer],
    witnesses: list[Signer],
    spec_factory: Callable[..., TrainingTaskSpec],
) -> int:
    """A posted task (``spec_factory()``), every witness bonded, every trainer enrolled: round 0 open."""
    task_id, _ = start_task(market, sponsor, spec_factory(), witnesses, trainers)
    return task_id


@pytest.fixture(scope="session")
def spec_factory(w3: Web3, witnesses: list[Signer]) -> Callable[..., TrainingTaskSpec]:
    """Valid spec with the session's witnesses and enrollment_deadline = chain time + 600."""

    def make(**overrides: Any) -> TrainingTaskSpec:
        overrides.setdefault("enrollment_deadline", devnet_mod.chain_time(w3) + 600)
        overrides.setdefault("witnesses", tuple(w.address for w in witnesses))
        return build_spec(**overrides)

    return make


@pytest.fixture
def offline_spec_factory() -> Callable[..., TrainingTaskSpec]:
    """Valid spec that needs no chain (fixed witnesses and deadline)."""

    def make(**overrides: Any) -> TrainingTaskSpec:
        overrides.setdefault("enrollment_deadline", OFFLINE_DEADLINE)
        overrides.setdefault("witnesses", OFFLINE_WITNESSES)
        return build_spec(**overrides)

    return make


@pytest.fixture
def gas() -> GasMeter:
    return GasMeter()


# ---------------------------------------------------------------------- waiting on real processes


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    check: Callable[[], None] | None = None,
    interval_s: float = 0.05,
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        if check is not None:
            check()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)
