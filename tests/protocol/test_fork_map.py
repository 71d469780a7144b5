"""``fork_map``: the round's worker processes (results in order, errors raised, no leftovers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from syncline.protocol.parallel import WorkerFailed, fork_map


def _children() -> list[int]:
    """Live or zombie child processes of this process (other tests' servers included: compare)."""
    me = str(os.getpid())
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            out.append(int(stat.parent.name))
    return out


def test_results_in_order_with_progress_in_order() -> None:
    before = _children()
    seen: list[tuple[int, int]] = []
    items = list(range(200))

    def square(x: int) -> int:
        if x % 7 == 0:
            time.sleep(0.002)  # uneven items: results arrive out of order
        return x * x

    assert fork_map(square, items, 2, on_result=lambda i, r: seen.append((i, r))) == [x * x for x in items]
    assert seen == [(x, x * x) for x in items]
    assert set(_children()) <= set(before)


def test_workers_inherit_inputs_and_return_large_results() -> None:
    big = np.arange(1 << 20, dtype=np.int64)  # inherited, not pickled
    out = fork_map(lambda i: big[i << 18 : (i + 1) << 18].tobytes(), [0, 1, 2, 3], 2)
    assert b"".join(out) == big.tobytes()


def test_exception_in_a_worker_is_raised_with_its_type_and_workers_are_reaped() -> None:
    before = _children()

    def fails_at_five(x: int) -> int:
        if x == 5:
            raise ValueError(f"state out of bounds in coordinates {x}")
        return x

    with pytest.raises(ValueError, match="state out of bounds in coordinates 5"):
        fork_map(fails_at_five, list(range(40)), 2)
    assert set(_children()) <= set(before)


def test_a_worker_that_dies_is_an_error_not_a_hang() -> None:
    before = _children()

    def dies_at_three(x: int) -> int:
        if x == 3:
            os._exit(3)
        return x

    with pytest.raises(WorkerFailed, match="not done"):
        fork_map(dies_at_three, list(range(10)), 2)
    assert set(_children()) <= set(before)


def test_one_worker_or_one_item_runs_in_process() -> None:
    pid = os.getpid()
    assert fork_map(lambda _: os.getpid(), [1, 2, 3], 1) == [pid, pid, pid]
    assert fork_map(lambda _: os.getpid(), [1], 4) == [pid]
    assert all(p != pid for p in fork_map(lambda _: os.getpid(), [1, 2], 2))
