"""The agents' polling loop rides out outages: it retries with capped exponential backoff for as
long as the run lives, reports degraded health once (logs and metrics) and recovers."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from syncline.blobstore.store import BlobUnavailable
from syncline.run import loop
from syncline.run.agent_config import ConfigError
from syncline.run.metrics import AgentMetrics

OUTAGE = 40  # failed ticks in a row: twice what the old circuit breaker allowed before it quit
POLL_S = 0.5


def flaky_step(failures: int, error: Callable[[int], Exception], on_tick: Callable[[int], None] | None = None):
    """A step that fails ``failures`` times, then succeeds once (not done), then is done."""
    ticks = [0]

    def step() -> bool:
        ticks[0] += 1
        if on_tick is not None:
            on_tick(ticks[0])
        if ticks[0] <= failures:
            raise error(ticks[0])
        return ticks[0] == failures + 2

    return step, ticks


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait of the loop, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    return waits


def test_a_long_outage_is_retried_with_capped_backoff_until_the_run_ends(slept: list[float]) -> None:
    step, ticks = flaky_step(OUTAGE, lambda n: BlobUnavailable(f"connection refused (try {n})"))
    with capture_logs() as logs:
        loop.run_forever(step, poll_interval_s=POLL_S, role="witness")
    assert ticks[0] == OUTAGE + 2  # never gave up; ended only when the step said the run is over
    schedule = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0] + [30.0] * (OUTAGE - 6)
    assert slept == [*schedule, POLL_S]  # after a success: back to the poll interval
    events = [e["event"] for e in logs]
    # two hiccups logged with their error, then one line when degraded, one when recovered
    assert events == ["agent.step_failed", "agent.step_failed", "agent.degraded", "agent.recovered"]
    degraded = logs[2]
    assert degraded["role"] == "witness" and degraded["failures"] == 3 and degraded["retry_in_s"] == 2.0
    assert degraded["error"] == "BlobUnavailable: connection refused (try 3)"
    assert logs[3]["failures"] == OUTAGE


def test_degraded_health_is_in_the_metrics_while_it_lasts() -> None:
    metrics = AgentMetrics("witness")
    sample = metrics.registry.get_sample_value
    seen: dict[int, tuple[Any, ...]] = {}

    def probe(tick: int) -> None:  # the metrics as a scrape sees them before each tick
        seen[tick] = tuple(
            sample(name, {"role": "witness"})
            for name in (
                "syncline_agent_degraded",
                "syncline_agent_consecutive_failures",
                "syncline_agent_retry_delay_seconds",
                "syncline_agent_errors_total",
            )
        )

    step, _ = flaky_step(OUTAGE, lambda n: OSError("[Errno 111] Connection refused"), probe)
    loop.run_forever(step, poll_interval_s=POLL_S, role="witness", metrics=metrics.loop, sleep=lambda s: None)
    assert seen[1] == (0.0, 0.0, 0.0, 0.0)  # the series exist (healthy) from the start
    assert seen[3] == (0.0, 2.0, 1.0, 2.0)  # two failures: not yet degraded
    assert seen[4] == (1.0, 3.0, 2.0, 3.0)
    assert seen[OUTAGE + 1] == (1.0, OUTAGE, 30.0, OUTAGE)
    assert seen[OUTAGE + 2] == (0.0, 0.0, 0.0, OUTAGE)  # recovered
    other = AgentMetrics("trainer").registry.get_sample_value
    assert other("syncline_agent_errors_total", {"role": "trainer"}) == 0.0  # one registry per agent
    assert other("syncline_agent_errors_total", {"role": "witness"}) is None


def test_unexpected_errors_are_retried_too(slept: list[float]) -> None:
    """A malformed answer can raise anything; the agent retries rather than abandon its run."""
    step, ticks = flaky_step(25, lambda n: KeyError("result") if n % 2 else RuntimeError("boom"))
    loop.run_forever(step, poll_interval_s=POLL_S, role="trainer")
    assert ticks[0] == 27


def test_a_configuration_error_stops_the_loop_at_once(slept: list[float]) -> None:
    step, ticks = flaky_step(5, lambda n: ConfigError("inner.inner_steps=8 but task 1 requires H=50"))
    with pytest.raises(ConfigError, match="requires H=50"):
        loop.run_forever(step, poll_interval_s=POLL_S, role="trainer")
    assert ticks[0] == 1 and slept == []


def test_backoff_schedule_is_deterministic_and_capped() -> None:
    b = loop.Backoff()
    assert [b.delay(n, 0.5) for n in range(9)] == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert b.delay(10**6, 0.5) == 30.0
    assert [b.delay(n, 5.0) for n in (0, 1, 4, 5, 8)] == [5.0, 5.0, 5.0, 8.0, 30.0]  # never below the poll interval
    assert loop.Backoff(first_s=1, max_s=4).delay(3, 0.1) == 4
    with pytest.raises(ValueError, match="first_s <= max_s"):
        loop.Backoff(first_s=10, max_s=1)


def test_health_turns_degraded_once_and_recovers() -> None:
    h = loop.LoopHealth(degraded_after=2)
    assert h.record_success() == loop.Transition.HEALTHY
    assert h.record_failure(now=10.0) == loop.Transition.FAILED
    assert h.record_failure(now=11.0) == loop.Transition.DEGRADED
    assert (h.degraded, h.degraded_since, h.failures) == (True, 11.0, 2)
    assert h.record_failure(now=12.0) == loop.Transition.STILL_DEGRADED
    assert h.record_success() == loop.Transition.RECOVERED
    assert (h.degraded, h.degraded_since, h.failures) == (False, None, 0)
    assert h.record_failure(now=13.0) == loop.Transition.FAILED  # a single hiccup is not degraded
    assert h.record_success() == loop.Transition.HEALTHY


class FakeBlocks:
    """A chain whose block number the test moves (the wake-up check reads it)."""

    def __init__(self) -> None:
        self.number = 7
        self.reads = 0

    @property
    def block_number(self) -> int:
        self.reads += 1
        return self.number


class FakeW3:
    def __init__(self) -> None:
        self.eth = FakeBlocks()


def test_a_new_block_wakes_an_idle_agent_before_its_poll_interval() -> None:
    """Early close: the agent ticks once the block that completes or finalizes a round is mined,
    not a whole poll interval later; with no new block it waits the full interval."""
    w3 = FakeW3()
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        if len(waits) == 3:  # a block is mined during the third wake-up interval of the first wait
            w3.eth.number += 1

    ticks: list[float] = []

    def step() -> bool:
        ticks.append(now[0])
        return len(ticks) == 3

    wake = loop.NewBlock(w3)  # type: ignore[arg-type]
    loop.run_forever(step, poll_interval_s=0.5, role="trainer", sleep=sleep, clock=lambda: now[0], wake=wake)
    assert ticks[1] == pytest.approx(0.3)  # woken after 3 x 0.1 s, not 0.5 s
    assert ticks[2] == pytest.approx(0.8)  # no new block: the whole poll interval
    assert waits[:3] == pytest.approx([0.1, 0.1, 0.1])


def test_wake_up_check_survives_a_node_outage() -> None:
    class Down:
        @property
        def block_number(self) -> int:
            raise ConnectionError("node down")

    class W3:
        eth = Down()

    wake = loop.NewBlock(W3())  # type: ignore[arg-type]
    wake.mark()
    assert wake() is False  # no wake-up; the next step fails and backs off as before


def test_a_task_not_posted_yet_is_waited_for_with_backoff_and_few_log_lines() -> None:
    """The chain is asked at 0.5, 1, 2, 4, 8, 8, ... s (not every tick), the wait is logged at the
    first check and then once a minute, and the task's arrival once; no failure is recorded."""
    now = [0.0]
    posted = [0]
    asked: list[float] = []

    def task_count() -> int:
        asked.append(now[0])
        return posted[0]

    awaiting = loop.TaskNotPosted(task_count, 3, role="trainer", clock=lambda: now[0])
    with capture_logs() as logs:
        while now[0] < 120:
            assert awaiting.waiting()
            now[0] += 0.25  # a tick every 0.25 s
        posted[0] = 3
        while awaiting.waiting():
            now[0] += 0.25
        assert not awaiting.waiting()
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(asked)]
    assert gaps[:5] == [0.5, 1.0, 2.0, 4.0, 8.0] and set(gaps[5:-1]) == {8.0}
    assert gaps[-1] <= 8.0  # the task was seen within one backoff step
    events = [e["event"] for e in logs]
    assert events == ["agent.waiting_for_task"] * 2 + ["agent.task_posted"], events
    assert logs[0]["task_id"] == 3 and "syncline train post-task" in logs[0]["hint"]
