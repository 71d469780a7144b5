"""The polling loop every agent runs: one ``step`` per tick, a circuit breaker on repeated failures.

Agents keep no state they cannot rebuild: each ``step`` re-reads the chain (and the agent's local
store), so ``kill -9`` and a restart resume where the chain is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from web3 import Web3

from syncline.errors import SynclineError
from syncline.observability import get_logger
from syncline.run.agent_config import ConfigError

log = get_logger("syncline.agent")


class CircuitOpen(SynclineError):
    """Too many consecutive failures: the agent stops instead of hammering the node."""


@dataclass
class CircuitBreaker:
    max_consecutive_failures: int = 20
    failures: int = 0

    def record(self, ok: bool) -> None:
        self.failures = 0 if ok else self.failures + 1
        if self.failures >= self.max_consecutive_failures:
            raise CircuitOpen(f"{self.failures} consecutive failures; stopping (see the log above)")


def pending_time(w3: Web3) -> int:
    """Timestamp the next block will have (the latest block's may be stale on an idle devnet)."""
    pending = int(w3.eth.get_block("pending")["timestamp"])
    return max(pending, int(w3.eth.get_block("latest")["timestamp"]))


def run_forever(
    step: Callable[[], bool],
    *,
    poll_interval_s: float,
    role: str,
    on_error: Callable[[Exception], None] | None = None,
    max_iterations: int | None = None,
) -> None:
    """Call ``step`` until it returns True (done). Errors are logged and counted by the breaker."""
    breaker = CircuitBreaker()
    iterations = 0
    while max_iterations is None or iterations < max_iterations:
        iterations += 1
        try:
            done = step()
            breaker.record(True)
            if done:
                return
        except (SynclineError, OSError, ValueError, ArithmeticError) as exc:
            if isinstance(exc, CircuitOpen | ConfigError):
                raise
            log.warning("agent.step_failed", role=role, error=str(exc).splitlines()[0][:200])
            if on_error is not None:
                on_error(exc)
            breaker.record(False)
        time.sleep(poll_interval_s)
