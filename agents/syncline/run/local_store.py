"""An agent's local store: an append-only JSON-lines log per agent, beside its restart state."""

from __future__ import annotations

import json
from pathlib import Path


def append_record(state_dir: Path, name: str, record: dict[str, object]) -> None:
    """Append one JSON line to ``state_dir/name``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / name).open("a") as fh:
        fh.write(json.dumps(record) + "\n")
