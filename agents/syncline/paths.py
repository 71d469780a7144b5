"""Where Syncline finds its repository, tools and run state on disk."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The repository root (holds ``contracts/`` and ``node_modules/``).

    ``SYNCLINE_ROOT`` overrides the default, which is two levels above this package.
    """
    override = os.environ.get("SYNCLINE_ROOT")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    """Run state (devnet files, artifact cache, demo output): ``<repo>/.syncline`` by default."""
    override = os.environ.get("SYNCLINE_STATE_DIR")
    path = Path(override) if override else repo_root() / ".syncline"
    path.mkdir(parents=True, exist_ok=True)
    return path
