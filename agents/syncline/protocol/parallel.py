"""Map a function over items in forked worker processes (the round's parallelism).

The items and the function are not pickled: workers are forked after they are set, so they
inherit them (large arrays, payload bytes, memory-mapped regions) for free. Workers claim item
indices one at a time from a counter in shared memory (so a worker slowed by another process on
its core takes fewer) and send back only each (small) result, pickled, over their own pipe.
Workers must not rely on threads or locks of the parent (they run numpy and keccak only).

Why not :class:`multiprocessing.pool.Pool`: its task, result and worker-handler threads cost the
parent about 1.6 ms of CPU per item when results are wanted one at a time (the round's progress),
a core's worth at 10^8 parameters, and it starts and stops in about 0.1 s; here the parent sleeps
in ``select`` until a result arrives (issue 12).
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import pickle
import select
import signal
import struct
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_HEADER = struct.Struct("<QB")  # body length, kind
_RESULT, _ERROR = 0, 1


class WorkerFailed(RuntimeError):
    """A worker died, or raised an exception that could not be sent back as it was."""


def _worker(fn: Callable[[Any], Any], items: Sequence[Any], claim: Any, out: int) -> None:
    """Claim indices until none is left; send ``(index, result)`` or the exception."""
    while True:
        with claim.get_lock():
            index = int(claim.value)
            claim.value = index + 1
        if index >= len(items):
            return
        try:
            body, kind = pickle.dumps((index, fn(items[index])), protocol=pickle.HIGHEST_PROTOCOL), _RESULT
        except BaseException as exc:  # sent to the parent, which raises it
            try:
                body = pickle.dumps((index, exc), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                body = pickle.dumps((index, WorkerFailed("".join(traceback.format_exception(exc))[-2000:])))
            kind = _ERROR
        _write_all(out, _HEADER.pack(len(body), kind) + body)
        if kind == _ERROR:
            return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fork_worker(fn: Callable[[Any], Any], items: Sequence[Any], claim: Any) -> tuple[int, int]:
    """Fork one worker; returns ``(pid, read end of its result pipe)``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the parent's code, never runs its atexit hooks
        code = 0
        try:
            os.close(read_fd)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            gc.disable()  # short-lived, and it makes no cycles worth a collection (~6 % of its CPU)
            _keep_heap()
            _worker(fn, items, claim, write_fd)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _keep_heap() -> None:
    """Make a worker keep the memory it frees for its next item (glibc only; elsewhere a no-op).

    A worker allocates the same few MB of numpy temporaries for every range. With glibc's
    default thresholds those above the (dynamic) mmap threshold are mapped and unmapped each
    time, and the heap the worker inherited is copied on its first writes: measured at 10^7
    parameters and 2 workers, 447k page faults and 0.38 s of kernel time instead of 129k and
    0.05 s. Fixed thresholds (arrays up to 64 MB from the heap, nothing given back below
    512 MB) keep the pages. The worker exits when the map ends, so nothing is held longer.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 64 << 20)
    mallopt(_M_TRIM_THRESHOLD, 512 << 20)


class _Inbox:
    """Length-prefixed messages from one worker's pipe, as they arrive."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, Any]]:
        self.buffer += data
        messages = []
        while len(self.buffer) >= _HEADER.size:
            length, kind = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + length:
                break
            body = bytes(self.buffer[_HEADER.size : _HEADER.size + length])
            del self.buffer[: _HEADER.size + length]
            messages.append((kind, pickle.loads(body)))
        return messages


def fork_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    *,
    on_result: Callable[[int, R], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]``, in up to ``workers`` forked processes when there is
    more than one item (in order; ``on_result(index, result)`` as each arrives, in order).

    An exception raised by ``fn`` in a worker is raised here (the other workers are stopped);
    a worker that dies raises :class:`WorkerFailed`.
    """
    workers = min(workers, len(items))
    if workers <= 1:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if on_result is not None:
                on_result(i, out[-1])
        return out
    claim = multiprocessing.get_context("fork").Value("q", 0)
    results: list[Any] = [None] * len(items)
    arrived = [False] * len(items)
    delivered = 0
    pids: list[int] = []
    pipes: dict[int, _Inbox] = {}
    finished = False
    # The workers' garbage collector would walk (and so copy, page by page) every object they
    # inherited: freeze them out of its reach for the workers' lifetime.
    gc.freeze()
    try:
        try:
            for _ in range(workers):
                pid, fd = _fork_worker(fn, items, claim)
                pids.append(pid)
                pipes[fd] = _Inbox()
        finally:
            gc.unfreeze()
        while pipes:
            ready, _, _ = select.select(list(pipes), [], [])
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if not data:
                    inbox = pipes.pop(fd)
                    os.close(fd)
                    if inbox.buffer:
                        raise WorkerFailed("a round worker stopped in the middle of a result")
                    continue
                for kind, (index, value) in pipes[fd].feed(data):
                    if kind == _ERROR:
                        raise value
                    results[index], arrived[index] = value, True
                while delivered < len(items) and arrived[delivered]:
                    if on_result is not None:
                        on_result(delivered, results[delivered])
                    delivered += 1
        if delivered < len(items):
            raise WorkerFailed(f"round workers stopped with {len(items) - delivered} of {len(items)} items not done")
        finished = True
        return results
    finally:
        for fd in pipes:
            os.close(fd)
        for pid in pids:
            _reap(pid, kill=not finished)


def _reap(pid: int, *, kill: bool) -> None:
    """Wait for a worker to exit (killing it first when the map failed)."""
    try:
        if kill:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass
