"""The API's database: the indexer's cursor, the raw market events and the read models.

SQLAlchemy 2 ORM over any URL (SQLite by default: ``<state_dir>/api/index.db``). Wei amounts
and 256-bit masks are stored as decimal strings (SQLite integers stop at 2**63). Only the indexer
thread writes; request handlers read through short sessions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    Integer,
    String,
    UniqueConstraint,
    create_engine,
    delete,
    event,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from syncline.paths import state_dir

WEI = String(80)  # uint256 as a decimal string
HEX32 = String(66)
ADDRESS = String(42)


class Base(DeclarativeBase):
    pass


class Cursor(Base):
    """How far the indexer got on which chain and market (one row)."""

    __tablename__ = "cursor"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chain_id: Mapped[int] = mapped_column(Integer)
    market: Mapped[str] = mapped_column(ADDRESS)
    deployment_block: Mapped[int] = mapped_column(Integer)
    last_block: Mapped[int] = mapped_column(Integer)
    last_block_hash: Mapped[str] = mapped_column(HEX32)


class RawEvent(Base):
    """One decoded market log, as emitted (args JSON-encoded: bytes as 0x-hex, ints as ints)."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("block_number", "log_index", name="uq_event_position"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    block_number: Mapped[int] = mapped_column(Integer, index=True)
    block_hash: Mapped[str] = mapped_column(HEX32)
    log_index: Mapped[int] = mapped_column(Integer)
    tx_hash: Mapped[str] = mapped_column(HEX32)
    timestamp: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(64), index=True)
    task_id: Mapped[int | None] = mapped_column(Integer, index=True, nullable=True)
    round: Mapped[int | None] = mapped_column(Integer, nullable=True)
    args: Mapped[dict[str, Any]] = mapped_column(JSON)


class TaskRow(Base):
    __tablename__ = "tasks"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sponsor: Mapped[str] = mapped_column(ADDRESS)
    status: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(256))
    tier: Mapped[str] = mapped_column(String(32))
    rule: Mapped[str] = mapped_column(String(32))
    rounds: Mapped[int] = mapped_column(Integer)
    current_round: Mapped[int] = mapped_column(Integer)
    rounds_finalized: Mapped[int] = mapped_column(Integer)
    rounds_carried: Mapped[int] = mapped_column(Integer)
    rounds_invalidated: Mapped[int] = mapped_column(Integer)
    trainers_enrolled: Mapped[int] = mapped_column(Integer)
    min_trainers: Mapped[int] = mapped_column(Integer)
    max_trainers: Mapped[int] = mapped_column(Integer)
    reward_pool_wei: Mapped[str] = mapped_column(WEI)
    escrow_wei: Mapped[str] = mapped_column(WEI)
    state_root: Mapped[str] = mapped_column(HEX32)
    open_challenges: Mapped[int] = mapped_column(Integer)
    posted_at: Mapped[int] = mapped_column(Integer)
    posted_block: Mapped[int] = mapped_column(Integer)
    posted_tx: Mapped[str] = mapped_column(HEX32)
    spec_hash: Mapped[str] = mapped_column(HEX32)
    spec_uri: Mapped[str] = mapped_column(String(2048))
    # Fields of the on-chain TaskSpec (getSpec), JSON-safe; always present.
    onchain_spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    # TaskView fields (getTaskState), wei as strings.
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The verified spec artifact (TrainingTaskSpec.to_mapping()) once fetched from the blob store.
    spec_artifact: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    spec_attempts: Mapped[int] = mapped_column(Integer, default=0)
    spec_next_try: Mapped[float] = mapped_column(Float, default=0.0)
    spec_error: Mapped[str | None] = mapped_column(String(512), nullable=True)


class RoundRow(Base):
    __tablename__ = "rounds"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(32))
    opened_at: Mapped[int] = mapped_column(Integer)
    deadline: Mapped[int] = mapped_column(Integer)
    closed_at: Mapped[int] = mapped_column(Integer)
    result: Mapped[str] = mapped_column(HEX32)
    state_root: Mapped[str] = mapped_column(HEX32)
    prev_state_root: Mapped[str] = mapped_column(HEX32)
    aggregate_root: Mapped[str] = mapped_column(HEX32)
    vote_count: Mapped[int] = mapped_column(Integer)
    committed_mask: Mapped[str] = mapped_column(WEI)
    accepted_mask: Mapped[str] = mapped_column(WEI)
    revoked_mask: Mapped[str] = mapped_column(WEI)
    validation_loss: Mapped[float | None] = mapped_column(Float, nullable=True)


class SubmissionRow(Base):
    __tablename__ = "submissions"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    fragment: Mapped[int] = mapped_column(Integer, primary_key=True)
    trainer: Mapped[str] = mapped_column(ADDRESS)
    weight: Mapped[int] = mapped_column(Integer)
    committed_at: Mapped[int] = mapped_column(Integer)
    payload_hash: Mapped[str] = mapped_column(HEX32)
    chunk_root: Mapped[str] = mapped_column(HEX32)
    checkpoint_root: Mapped[str] = mapped_column(HEX32)
    uri: Mapped[str] = mapped_column(String(2048))
    tx: Mapped[str] = mapped_column(HEX32)


class VoteRow(Base):
    __tablename__ = "votes"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    witness: Mapped[str] = mapped_column(ADDRESS, primary_key=True)
    result: Mapped[str] = mapped_column(HEX32)
    state_root: Mapped[str] = mapped_column(HEX32)
    aggregate_root: Mapped[str] = mapped_column(HEX32)
    accepted_mask: Mapped[str] = mapped_column(WEI)
    metric: Mapped[str] = mapped_column(WEI)
    dissent: Mapped[bool] = mapped_column(Boolean)
    block_number: Mapped[int] = mapped_column(Integer)
    tx: Mapped[str] = mapped_column(HEX32)


class TrainerRow(Base):
    __tablename__ = "trainers"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    address: Mapped[str] = mapped_column(ADDRESS, primary_key=True)
    fragment: Mapped[int] = mapped_column(Integer)
    enrolled: Mapped[bool] = mapped_column(Boolean)
    evicted: Mapped[bool] = mapped_column(Boolean)
    stake_wei: Mapped[str] = mapped_column(WEI)
    slashed_wei: Mapped[str] = mapped_column(WEI)
    shard_mask: Mapped[str] = mapped_column(WEI)
    submitted: Mapped[int] = mapped_column(Integer)
    accepted: Mapped[int] = mapped_column(Integer)
    missed: Mapped[int] = mapped_column(Integer)
    consecutive_missed: Mapped[int] = mapped_column(Integer)
    accepted_weight: Mapped[int] = mapped_column(Integer)
    reward_wei: Mapped[str] = mapped_column(WEI)


class WitnessRow(Base):
    __tablename__ = "witnesses"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    address: Mapped[str] = mapped_column(ADDRESS, primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    bonded: Mapped[bool] = mapped_column(Boolean)
    bond_wei: Mapped[str] = mapped_column(WEI)
    slashed_wei: Mapped[str] = mapped_column(WEI)
    votes: Mapped[int] = mapped_column(Integer)
    matched: Mapped[int] = mapped_column(Integer)
    dissents: Mapped[int] = mapped_column(Integer)
    fees_wei: Mapped[str] = mapped_column(WEI)


class ChallengeRow(Base):
    __tablename__ = "challenges"
    challenge_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, index=True)
    round: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(32))
    fragment: Mapped[int] = mapped_column(Integer)
    segment: Mapped[int] = mapped_column(Integer)
    challenger: Mapped[str] = mapped_column(ADDRESS)
    accused: Mapped[str] = mapped_column(ADDRESS)
    bond_wei: Mapped[str] = mapped_column(WEI)
    slashed_wei: Mapped[str] = mapped_column(WEI)
    opened_at: Mapped[int] = mapped_column(Integer)
    deadline: Mapped[int] = mapped_column(Integer)
    guilty_votes: Mapped[int] = mapped_column(Integer)
    innocent_votes: Mapped[int] = mapped_column(Integer)
    tx: Mapped[str] = mapped_column(HEX32)


class TrainerLossRow(Base):
    """A trainer's signed self-reported training loss for one round (``TrainerReport``)."""

    __tablename__ = "trainer_losses"
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    fragment: Mapped[int] = mapped_column(Integer, primary_key=True)
    trainer: Mapped[str] = mapped_column(ADDRESS)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # pending (not fetched yet), ok, absent (gave up), rejected (signed by someone else)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_try: Mapped[float] = mapped_column(Float, default=0.0)


READ_MODELS: tuple[type[Base], ...] = (
    TaskRow,
    RoundRow,
    SubmissionRow,
    VoteRow,
    TrainerRow,
    WitnessRow,
    ChallengeRow,
    TrainerLossRow,
)
TASK_SCOPED: tuple[Any, ...] = (TaskRow, RoundRow, SubmissionRow, VoteRow, TrainerRow, WitnessRow, ChallengeRow)


def default_url() -> str:
    path = state_dir() / "api" / "index.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


class Database:
    """An engine plus a session factory; creates the tables on first use."""

    def __init__(self, url: str | None = None):
        self.url = url or default_url()
        self.engine = _engine(self.url)
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A read session (rolled back on exit)."""
        with self._sessions() as s:
            yield s

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A write session: committed on success, rolled back on error."""
        with self._sessions() as s, s.begin():
            yield s

    def wipe(self, s: Session) -> None:
        """Delete everything the indexer wrote (cursor, events, read models)."""
        models: tuple[type[Base], ...] = (Cursor, RawEvent, *READ_MODELS)
        for model in models:
            s.execute(delete(model))

    def dispose(self) -> None:
        self.engine.dispose()


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        in_memory = url in ("sqlite://", "sqlite:///:memory:")
        if not in_memory:
            file = url.split("///", 1)[-1]
            Path(file).parent.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if in_memory:
            options["poolclass"] = StaticPool
        engine = create_engine(url, **options)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            if not in_memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)
