"""Where the court keeps what it judges on disk: states, payloads and checkpoints of a large model.

A challenger or a referee of a large model (``state_on_disk``, the agents' default from 4M
parameters up) must not hold a state (16 bytes per parameter), a round's payloads or a checkpoint
(12 bytes per parameter) in memory: a witness that audits and referees a 120M-parameter task would
need several GB for each. :class:`CourtFiles` is its directory:

* ``states/``: state files by root (:meth:`CourtFiles.state` fetches one with
  ``TaskContext.fetch_state_file``, streamed and checked by recomputing its root; a state the
  auditor computed itself is kept with :meth:`CourtFiles.adopt`, so the next round's audit and
  its training checks start from it without downloading it). At most ``keep`` are held (the
  least recently used goes first); :meth:`CourtFiles.release` drops one no check needs any more.
* ``payloads/``: a round's payload files while it is audited (deleted afterwards);
* ``checkpoints/``: the checkpoints one segment check fetched, and its replay (deleted after
  each check, :meth:`CourtFiles.clear_checkpoints`).
"""

from __future__ import annotations

import shutil
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from syncline.observability import get_logger
from syncline.run.context import TaskContext
from syncline.run.state_file import StateFile

log = get_logger("syncline.court")

DEFAULT_KEEP_STATES = 3
"""A round's start state, the state it finalized (the next round's start), and one more while an
earlier round still waits for a drawn segment."""


@dataclass
class CourtFiles:
    """The court's scratch directory for one task (see the module docstring)."""

    directory: Path
    keep: int = DEFAULT_KEEP_STATES
    _states: OrderedDict[str, StateFile] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        # nothing from an earlier process is trusted or reused: it is fetched again when needed
        shutil.rmtree(self.directory, ignore_errors=True)
        for sub in (self.states_dir, self.payloads, self.checkpoints):
            sub.mkdir(parents=True, exist_ok=True)

    @property
    def states_dir(self) -> Path:
        return self.directory / "states"

    @property
    def payloads(self) -> Path:
        return self.directory / "payloads"

    @property
    def checkpoints(self) -> Path:
        return self.directory / "checkpoints"

    def state(self, ctx: TaskContext, root: str) -> StateFile:
        """The state whose root is ``root`` in a file: held, or fetched (streamed and verified).
        Raises ``StateUnavailable``."""
        root = root.lower()
        held = self._states.get(root)
        if held is not None and held.path.exists():
            self._states.move_to_end(root)
            return held
        state, size = ctx.fetch_state_file(root, self.states_dir / f"{root}.safetensors")
        log.info("court.state_fetched", root=root[:18], bytes=size)
        return self._hold(root, state)

    def adopt(self, state: StateFile) -> StateFile:
        """Keep ``state`` (a file this process computed, its root known) for the checks to come."""
        root = state.state_root_hex
        state.move_to(self.states_dir / f"{root}.safetensors")
        return self._hold(root, state)

    def work_path(self, round_: int) -> Path:
        """Where the auditor computes round ``round_``'s state (then adopted, or removed)."""
        return self.states_dir / f"round-{round_}.safetensors"

    def release(self, root: str) -> None:
        """Drop the state ``root`` (no check needs it any more)."""
        held = self._states.pop(root.lower(), None)
        if held is not None:
            held.remove()

    def held_roots(self) -> list[str]:
        """The roots held, least recently used first."""
        return list(self._states)

    def clear_checkpoints(self) -> None:
        """Delete the checkpoints and replays of the last segment check."""
        for path in self.checkpoints.iterdir():
            path.unlink(missing_ok=True)

    def _hold(self, root: str, state: StateFile) -> StateFile:
        self._states[root] = state
        self._states.move_to_end(root)
        while len(self._states) > self.keep:
            _, oldest = self._states.popitem(last=False)
            oldest.remove()
        return state
