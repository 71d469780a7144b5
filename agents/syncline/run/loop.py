"""The polling loop every agent runs: one ``step`` per tick, failures retried with backoff.

Agents keep no state they cannot rebuild: each ``step`` re-reads the chain (and the agent's local
store), so ``kill -9`` and a restart resume where the chain is. For the same reason a failed step
is simply tried again: an agent that gives up during an outage of the node or the blob service
forfeits its fees, misses rounds or leaves a vote out, so it never gives up while its run lives.
It retries on a capped exponential schedule (:class:`Backoff`, 0.5 s doubling to 30 s) and reports
the outage as *degraded* health: one log line when it turns degraded, one when it recovers, and
the ``syncline_agent_degraded`` / ``syncline_agent_consecutive_failures`` gauges
(:class:`~syncline.run.metrics.LoopMetrics`) meanwhile.

The loop ends only when ``step`` says the agent's part in the run is over (the task is sealed or
cancelled and everything is claimed), or on an error no retry can fix: a configuration error
(:data:`FATAL_ERRORS`).
"""

from __future__ import annotations

import enum
import functools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from web3 import Web3

from syncline.errors import KeyConfigError
from syncline.observability import get_logger
from syncline.run.agent_config import ConfigError
from syncline.run.metrics import LoopMetrics

log = get_logger("syncline.agent")

FATAL_ERRORS: tuple[type[Exception], ...] = (ConfigError, KeyConfigError)
"""Errors that stop the loop: the agent's own configuration is wrong, and retrying cannot fix it."""


@dataclass(frozen=True)
class Backoff:
    """Deterministic capped exponential backoff: the ``n``-th consecutive failure waits
    ``first_s * 2**(n-1)`` seconds, at most ``max_s`` and never less than the poll interval."""

    first_s: float = 0.5
    max_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s:
            raise ValueError(f"backoff needs 0 < first_s <= max_s, got {self.first_s} and {self.max_s}")

    def delay(self, failures: int, poll_interval_s: float) -> float:
        """Seconds to wait before the next tick after ``failures`` consecutive failures (0: a success)."""
        if failures <= 0:
            return poll_interval_s
        grown: float = self.first_s * 2.0 ** min(failures - 1, 32)
        return max(poll_interval_s, min(self.max_s, grown))


class Transition(enum.Enum):
    """What one tick's outcome changed in the loop's health (and so what is logged)."""

    HEALTHY = "healthy"  # a success while healthy: nothing to say
    FAILED = "failed"  # a failure before the loop counts as degraded: logged with its error
    DEGRADED = "degraded"  # the failure that makes it degraded: one line
    STILL_DEGRADED = "still_degraded"  # a further failure while degraded: not logged
    RECOVERED = "recovered"  # the first success after being degraded: one line


@dataclass
class LoopHealth:
    """Consecutive failures and the degraded flag of one polling loop (pure: no I/O, no clock).

    The loop is degraded from the ``degraded_after``-th consecutive failure until the next
    success; a shorter run of failures is a hiccup, logged failure by failure."""

    degraded_after: int = 3
    failures: int = 0
    degraded: bool = False
    degraded_since: float | None = None

    def record_failure(self, now: float) -> Transition:
        self.failures += 1
        if self.degraded:
            return Transition.STILL_DEGRADED
        if self.failures >= self.degraded_after:
            self.degraded, self.degraded_since = True, now
            return Transition.DEGRADED
        return Transition.FAILED

    def record_success(self) -> Transition:
        was_degraded = self.degraded
        self.failures, self.degraded, self.degraded_since = 0, False, None
        return Transition.RECOVERED if was_degraded else Transition.HEALTHY


class NewBlock:
    """A cheap wake-up test for :func:`run_forever`: true once the chain has a block it had not
    when :meth:`mark` was last called. Every on-chain event an agent waits for (a commitment that
    completes a round, the vote that finalizes it) arrives in a new block, so an idle agent that
    polls the block number (one small RPC) reacts within ``wake_interval_s`` instead of a whole
    ``poll_interval_s``; deadlines that pass with no block are still seen at the next poll."""

    def __init__(self, w3: Web3):
        self.w3 = w3
        self._seen: int | None = None

    def mark(self) -> None:
        """Remember the current block number (called before each step)."""
        try:
            self._seen = int(self.w3.eth.block_number)
        except Exception:  # the node is down: the step will fail and back off
            self._seen = None

    def __call__(self) -> bool:
        try:
            number = int(self.w3.eth.block_number)
        except Exception:
            return False
        if self._seen is None:
            self._seen = number
            return False
        return number != self._seen


class TaskNotPosted:
    """Whether the agent's task exists yet: an agent started before the sponsor posted its task
    waits for it (a normal state, not an outage) instead of failing tick after tick.

    The chain is asked with capped exponential backoff (``backoff``: 0.5 s doubling to 8 s by
    default), one ``taskCount`` call each time; ``agent.waiting_for_task`` is logged at the first
    check and then every ``log_every_s`` seconds, ``agent.task_posted`` once it appears."""

    def __init__(
        self,
        count: Callable[[], int],
        task_id: int,
        *,
        role: str,
        backoff: Backoff = Backoff(first_s=0.5, max_s=8.0),
        log_every_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ):
        self.count = count
        self.task_id = task_id
        self.role = role
        self.backoff = backoff
        self.log_every_s = log_every_s
        self.clock = clock or time.monotonic
        self.checks = 0
        self._posted = False
        self._next_check = 0.0
        self._logged_at: float | None = None
        self._since: float | None = None

    def waiting(self) -> bool:
        """True while the task does not exist (the step should return and try again later)."""
        if self._posted:
            return False
        now = self.clock()
        if now < self._next_check:
            return True
        tasks = self.count()
        if tasks >= self.task_id:
            self._posted = True
            if self._since is not None:
                waited = round(now - self._since, 1)
                log.info("agent.task_posted", role=self.role, task_id=self.task_id, waited_s=waited)
            return False
        self.checks += 1
        self._since = now if self._since is None else self._since
        delay = self.backoff.delay(self.checks, 0.0)
        self._next_check = now + delay
        if self._logged_at is None or now - self._logged_at >= self.log_every_s:
            self._logged_at = now
            log.info(
                "agent.waiting_for_task",
                role=self.role,
                task_id=self.task_id,
                tasks_on_chain=tasks,
                waited_s=round(now - self._since, 1),
                next_check_s=delay,
                hint="the task is not posted yet: post it (`syncline train post-task`) or check task_id",
            )
        return True


def pending_time(w3: Web3) -> int:
    """Timestamp the next block will have (the latest block's may be stale on an idle devnet)."""
    pending = int(w3.eth.get_block("pending")["timestamp"])
    return max(pending, int(w3.eth.get_block("latest")["timestamp"]))


def pending_block(w3: Web3) -> int:
    """Number the next block will have: what ``block.number`` is for a transaction sent now."""
    return int(w3.eth.block_number) + 1


def _one_line(exc: Exception) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AgentStopped(BaseException):
    """SIGTERM arrived (``kill``, a supervisor, ``syncline network down``): raised in the main
    thread so the loop logs one line and exits with 128 + the signal's number. A ``BaseException``:
    a step's ``except Exception`` never swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def _raise_stopped(signum: int, frame: object) -> None:
    raise AgentStopped(signum)


F = TypeVar("F", bound=Callable[..., None])


def logs_stop_signals(loop: F) -> F:
    """Wrap an agent's loop: SIGINT (Ctrl-C) and SIGTERM each log one ``agent.stopped`` line naming
    the signal and the role; SIGTERM then exits with status 143 (``SystemExit``), Ctrl-C re-raises.
    SIGTERM is caught in the main thread only (elsewhere Python cannot install a handler)."""

    @functools.wraps(loop)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        role = kwargs.get("role", "agent")
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_stopped) if main else None
        try:
            loop(*args, **kwargs)
        except KeyboardInterrupt:
            log.info("agent.stopped", role=role, signal="SIGINT")
            raise
        except AgentStopped as stop:
            log.info("agent.stopped", role=role, signal=stop.name)
            raise SystemExit(128 + stop.signum) from None
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)

    return cast(F, wrapper)


@logs_stop_signals
def run_forever(
    step: Callable[[], bool],
    *,
    poll_interval_s: float,
    role: str,
    metrics: LoopMetrics | None = None,
    backoff: Backoff = Backoff(),
    on_error: Callable[[Exception], None] | None = None,
    max_iterations: int | None = None,
    sleep: Callable[[float], None] | None = None,
    clock: Callable[[], float] | None = None,
    wake: NewBlock | None = None,
    wake_interval_s: float = 0.1,
) -> None:
    """Call ``step`` until it returns True (done); a failed step is retried after ``backoff``.

    Between two successful steps the loop waits ``poll_interval_s``, or less with ``wake``: it
    checks ``wake()`` every ``wake_interval_s`` and ticks at once when it is true (a new block).
    A failed step always waits out its backoff.
    Only :data:`FATAL_ERRORS` (and ``BaseException``: Ctrl-C, ``SystemExit``) end the loop early;
    Ctrl-C and SIGTERM log one line first (:func:`logs_stop_signals`).
    ``max_iterations``, ``sleep`` and ``clock`` (default ``time.sleep`` and ``time.monotonic``)
    exist for tests."""
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    health = LoopHealth()
    started_failing: float | None = None
    iterations = 0
    while max_iterations is None or iterations < max_iterations:
        iterations += 1
        if wake is not None:
            wake.mark()
        try:
            done = step()
        except FATAL_ERRORS:
            raise
        except Exception as exc:
            now = clock()
            if health.failures == 0:
                started_failing = now
            transition = health.record_failure(now)
            delay = backoff.delay(health.failures, poll_interval_s)
            error = _one_line(exc)
            if transition == Transition.FAILED:
                log.warning("agent.step_failed", role=role, failures=health.failures, retry_in_s=delay, error=error)
            elif transition == Transition.DEGRADED:
                log.warning(
                    "agent.degraded",
                    role=role,
                    failures=health.failures,
                    failing_for_s=round(now - (started_failing or now), 1),
                    retry_in_s=delay,
                    error=error,
                )
            if metrics is not None:
                metrics.failed(health.failures, degraded=health.degraded, retry_in_s=delay)
            if on_error is not None:
                on_error(exc)
            sleep(delay)
            continue
        failures, since = health.failures, health.degraded_since
        if health.record_success() == Transition.RECOVERED:
            log.info(
                "agent.recovered", role=role, failures=failures, degraded_for_s=round(clock() - (since or clock()), 1)
            )
        if metrics is not None:
            metrics.succeeded()
        if done:
            return
        _wait(poll_interval_s, sleep, clock, wake, wake_interval_s)


def _wait(
    seconds: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    wake: Callable[[], bool] | None,
    interval_s: float,
) -> None:
    """Sleep ``seconds``, or until ``wake()`` is true (checked every ``interval_s``)."""
    if wake is None or interval_s >= seconds:
        sleep(seconds)
        return
    end = clock() + seconds
    while True:
        left = end - clock()
        if left <= 0:
            return
        sleep(min(interval_s, left))
        if wake():
            return
