"""An agent's local store: an append-only JSON-lines log per agent, beside its restart state."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from syncline.run.agent_config import ConfigError

LOCK_FILE = "agent.lock"
SIGNED_VOTES_FILE = "signed-votes.jsonl"
"""Every vote a witness signed, written before it is published (read by its own challenger too)."""


@contextlib.contextmanager
def claim_state_dir(state_dir: Path) -> Iterator[None]:
    """Hold ``state_dir`` for this agent process: two agents on one ``state_dir`` would mix their
    signed-message logs and optimizer state. A directory another live agent holds is a
    :class:`ConfigError` naming its pid; the lock goes with the process (``kill -9`` included)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(
                f"state_dir {state_dir} is in use by another agent (pid {holder}): give each agent its own state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def append_record(state_dir: Path, name: str, record: dict[str, object]) -> None:
    """Append one JSON line to ``state_dir/name``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / name).open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def append_durable(state_dir: Path, name: str, record: dict[str, object]) -> None:
    """Append one JSON line to ``state_dir/name`` and flush it to disk before returning (for a
    record that must survive a crash right after, such as a signed message about to be published)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / name).open("a") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` durably: a temporary file, fsync, then rename into place (a
    crash leaves the old file or the new one, never a torn one).

    ``durable=False`` skips the fsync: the file survives the process, and :func:`sync_files`
    makes it durable later (a caller that overlaps the disk flush with other work)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def sync_files(paths: Sequence[Path]) -> None:
    """Flush files written with ``write_atomic(..., durable=False)`` to disk, then their directories."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for directory in dict.fromkeys(p.parent for p in paths):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_records(state_dir: Path, name: str) -> list[dict[str, object]]:
    """Every complete JSON line of ``state_dir/name`` (none if the file is absent; a torn last
    line, from a crash mid-write, is skipped)."""
    path = state_dir / name
    if not path.exists():
        return []
    out: list[dict[str, object]] = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
