"""Map a function over items in forked worker processes (the round's parallelism).

The items and the function are not pickled: workers are forked after they are set, so they
inherit them (large arrays, payload bytes, memory-mapped regions) for free; only each item's
index goes to a worker and only the (small) result comes back. Workers must not rely on
threads or locks of the parent (they run numpy and keccak only).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_TASK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def _call(index: int) -> Any:
    assert _TASK is not None
    fn, items = _TASK
    return fn(items[index])


def fork_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    *,
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, in up to ``workers`` forked processes when there is
    more than one item (in order; ``on_result(index, result)`` as each arrives, in order)."""
    global _TASK
    workers = min(workers, len(items))
    if workers <= 1:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if on_result is not None:
                on_result(i, out[-1])
        return out
    previous, _TASK = _TASK, (fn, items)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            chunk = 1 if on_result is not None else max(1, len(items) // (workers * 16))
            results: list[R] = []
            for i, result in enumerate(pool.imap(_call, range(len(items)), chunksize=chunk)):
                results.append(result)
                if on_result is not None:
                    on_result(i, result)
            return results
    finally:
        _TASK = previous
