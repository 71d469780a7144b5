"""Request limits of the API that FastAPI has no place for: the task-preparation gate."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from syncline.api.errors import ApiError


class PrepareGate:
    """Bounds ``POST /api/tasks/prepare``, which costs seconds of CPU per call and needs no signature:
    one build at a time (a second one gets 429 at once instead of queueing a thread), and at most
    ``per_minute`` builds per client address in any 60 s (429 beyond). Requests refused as invalid
    (422) or busy (429) do not count."""

    WINDOW_S = 60.0

    def __init__(
        self,
        per_minute: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        what: str = "task preparations",
        busy: str = "another task is being prepared",
    ) -> None:
        if per_minute < 1:
            raise ValueError(f"per_minute must be >= 1, got {per_minute}")
        self.per_minute = per_minute
        self.what = what
        self.busy = busy
        self.clock = clock
        self._building = threading.Lock()
        self._recent: dict[str, deque[float]] = {}

    @contextmanager
    def build(self, client: str) -> Iterator[None]:
        """Hold the build slot for ``client``; raises ``ApiError(429)`` when busy or over the rate."""
        if not self._building.acquire(blocking=False):
            raise ApiError(429, f"{self.busy}; retry in a few seconds")
        try:
            now = self.clock()
            recent = self._recent.setdefault(client, deque())
            while recent and recent[0] <= now - self.WINDOW_S:
                recent.popleft()
            if len(recent) >= self.per_minute:
                wait = recent[0] + self.WINDOW_S - now
                raise ApiError(
                    429, f"at most {self.per_minute} {self.what} per minute per client; retry in {wait:.0f} s"
                )
            recent.append(now)
            for key in [k for k, v in self._recent.items() if not v]:
                del self._recent[key]
            yield
        finally:
            self._building.release()
