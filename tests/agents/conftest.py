"""Fixtures of the agent integration tests.

``SYNCLINE_STATE_DIR`` points at one session-scoped directory so the Shakespeare corpus
(BPE tokenizer training, ~15 s) is prepared once for every test here, and the compiled contract
artifacts are copied in from the repository cache instead of being recompiled (~20 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncline.chain.toolchain import compile_contracts
from syncline.sponsor.task_builder import cached_corpus

from ._agent_harness import SHARD_COUNT, VOCAB_SIZE


@pytest.fixture(scope="session")
def agents_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir with the contract artifacts and the tiny task's corpus already in place."""
    root = tmp_path_factory.mktemp("syncline-state")
    cache = next(iter(compile_contracts().values())).path.parent  # repo cache; compiles only if stale
    shutil.copytree(cache, root / "artifacts" / cache.name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYNCLINE_STATE_DIR", str(root))
        cached_corpus(SHARD_COUNT, VOCAB_SIZE)
    return root


@pytest.fixture
def state_env(agents_state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test (and every agent process it spawns) uses the session state dir."""
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(agents_state_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return agents_state_dir


@pytest.fixture
def local_devnet_home(
    agents_state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A private state dir (``.syncline`` of a fresh checkout: the compiled contracts and the tiny
    task's corpus copied in) with ``syncline devnet up`` running in it: (state dir, environment of
    the commands). This process sees the same ``SYNCLINE_STATE_DIR``; ``devnet down`` after."""
    root = tmp_path / "dot-syncline"
    for sub in ("artifacts", "datasets"):
        shutil.copytree(agents_state_dir / sub, root / sub)
    env = {**os.environ, "SYNCLINE_STATE_DIR": str(root), "HF_HUB_OFFLINE": "1", "SYNCLINE_LOG_FORMAT": "console"}
    monkeypatch.setenv("SYNCLINE_STATE_DIR", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    syncline = [sys.executable, "-m", "syncline.cli"]
    up = subprocess.run([*syncline, "devnet", "up"], env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        yield root, env
    finally:
        subprocess.run([*syncline, "devnet", "down"], env=env, capture_output=True, timeout=60)
