"""A round computed range of chunks by range of chunks: bounded memory, hashed in the same pass.

:func:`stream_round` is the one implementation of a round's aggregation, outer step and
commitments (:func:`syncline.protocol.sync_round.compute_round` validates the submissions and
calls it). It never stacks the ``n x numel`` int64 input matrix: it works on ranges of
``range_chunks`` chunks (a power of two), holding ``n x range`` int64 values at once, and
computes each range's state and aggregate chunk hashes, Merkle leaves and the range's subtree
root while the values are hot. Because ranges are aligned power-of-two blocks of leaves, the
full tree's root is the root over the ranges' subtree roots (:func:`merkle.root_of_blocks`), so
ranges are independent and run in worker processes (``fork``) when the round is large.

Passes per rule (every pass reads the inputs of one range; only the last writes the state):

* Mean, TrimmedMean, CoordinateMedian: coordinate ``i`` of the aggregate depends only on
  coordinate ``i`` of the inputs, so one pass does everything.
* Krum, Multi-Krum: a first pass sums each range's exact per-chunk squared distances (Python
  ints, exactly as :func:`aggregation.pairwise_sq_distances`), the scores select the rows, and
  the last pass averages the selected rows.
* CenteredClip with ``T`` iterations: pass 0 writes ``v_0 = median`` to a scratch vector and
  sums the exact squared norms of ``x - v_0``; pass ``t`` turns the norms into clip factors,
  writes ``v_t`` and sums the norms for the next iteration; the last pass computes ``v_T`` as
  the aggregate. ``T + 1`` passes, 8 bytes per parameter of scratch.

Where vectors live: a :class:`Region` is read and written by coordinate range. An
:class:`ArrayRegion` wraps an array in memory (use :func:`shared_region` for outputs written
by worker processes); a :class:`FileRegion` reads and writes a file with ``pread``/``pwrite``
(a state or payload of any size on disk, resident memory independent of its size). Outputs may
be the inputs' own regions (the state is updated in place): every pass reads a range before
the last pass writes it.

Results are byte-identical to the whole-vector definitions of :mod:`syncline.protocol.aggregation`
and :mod:`syncline.protocol.outer_optimizer` (``tests/protocol/test_streamed_round.py`` checks every
rule against the old whole-vector ``compute_round`` with Hypothesis).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from syncline.protocol import merkle
from syncline.protocol.aggregation import (
    CLIP_FACTOR_BITS,
    DIST_SHIFT,
    AggregationRuleImpl,
    CenteredClip,
    CoordinateMedian,
    Krum,
    Mean,
    MultiKrum,
    TrimmedMean,
    clip_factors,
    clip_radius_grid,
    krum_scores,
)
from syncline.protocol.chunking import hash_rows, state_chunk_buffer
from syncline.protocol.fixed_point import CHUNK_SIZE, exact_sum, num_chunks, pad_chunks
from syncline.protocol.outer_optimizer import STATE_MAX, coefficients, nesterov_arrays
from syncline.protocol.parallel import fork_map
from syncline.protocol.quantization import QuantizedGradient

DEFAULT_RANGE_CHUNKS = 256
"""Chunks per range (64 Ki coordinates): ``n x 512`` KiB of int64 inputs at once."""
PARALLEL_MIN_NUMEL = 1 << 21
"""Below this many coordinates a round runs in the calling process (forking costs more)."""
_SORT_BLOCK = 1 << 15
_NETWORK_MAX_INPUTS = 16


# ---------------------------------------------------------------------------------------------
# Where vectors live
# ---------------------------------------------------------------------------------------------


class Region(Protocol):
    """A 1-D vector read and written by coordinate range."""

    @property
    def numel(self) -> int: ...

    def read(self, start: int, stop: int) -> np.ndarray: ...

    def write(self, start: int, values: np.ndarray) -> None: ...


@dataclass(frozen=True)
class ArrayRegion:
    """A vector in memory (a numpy array, a memmap, or a :func:`shared_region`)."""

    array: np.ndarray
    shared: bool = False
    """True when writes from forked worker processes reach the parent (a shared mapping)."""

    @property
    def numel(self) -> int:
        return int(self.array.shape[0])

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.array[start:stop]

    def write(self, start: int, values: np.ndarray) -> None:
        self.array[start : start + values.shape[0]] = values


def shared_region(numel: int, dtype: type = np.int64) -> ArrayRegion:
    """A zeroed vector in anonymous shared memory, writable by forked worker processes."""
    size = max(1, numel * np.dtype(dtype).itemsize)
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return ArrayRegion(np.frombuffer(buffer, dtype=dtype, count=numel), shared=True)


@dataclass
class FileRegion:
    """``numel`` values of ``dtype`` at byte ``offset`` of a file, accessed with pread/pwrite.

    Resident memory stays at one range whatever the file's size (a memory map would count every
    touched page). Each process opens its own descriptor.
    """

    path: str
    offset: int
    numel_: int
    dtype: str = "<i8"
    writable: bool = False
    _fd: int | None = field(default=None, repr=False)
    _pid: int = field(default=-1, repr=False)

    @property
    def numel(self) -> int:
        return self.numel_

    def _descriptor(self) -> int:
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def read(self, start: int, stop: int) -> np.ndarray:
        width = np.dtype(self.dtype).itemsize
        want = (stop - start) * width
        data = os.pread(self._descriptor(), want, self.offset + start * width)
        if len(data) != want:
            raise ValueError(f"{self.path}: short read at coordinate {start} ({len(data)} of {want} bytes)")
        return np.frombuffer(data, dtype=self.dtype).astype(self.dtype[1:])

    def write(self, start: int, values: np.ndarray) -> None:
        if not self.writable:
            raise ValueError(f"{self.path} is opened read-only")
        width = np.dtype(self.dtype).itemsize
        os.pwrite(self._descriptor(), values.astype(self.dtype).tobytes(), self.offset + start * width)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


@dataclass(frozen=True)
class GradientInput:
    """A validated quantized gradient: its ``values`` (int8/int16) and per-chunk ``exponents``."""

    bits: int
    values: Region
    exponents: np.ndarray

    @classmethod
    def of(cls, qg: QuantizedGradient) -> GradientInput:
        return cls(qg.bits, ArrayRegion(qg.values.numpy()), qg.exponents.numpy())

    def dequantized(self, first: int, last: int, numel: int, out: np.ndarray | None = None) -> np.ndarray:
        """Exact Q32 values ``q << e`` of chunks ``[first, last)`` (int64; into ``out`` if given)."""
        start, stop = first * CHUNK_SIZE, min(last * CHUNK_SIZE, numel)
        values = self.values.read(start, stop).astype(np.int64)
        exps = self.exponents[first:last].astype(np.int64)
        full = (stop - start) // CHUNK_SIZE
        out = np.empty(stop - start, dtype=np.int64) if out is None else out
        body = out[: full * CHUNK_SIZE].reshape(full, CHUNK_SIZE)
        np.left_shift(values[: full * CHUNK_SIZE].reshape(full, CHUNK_SIZE), exps[:full, None], out=body)
        if full * CHUNK_SIZE < stop - start:
            out[full * CHUNK_SIZE :] = values[full * CHUNK_SIZE :] << exps[full]
        return out


# ---------------------------------------------------------------------------------------------
# Coordinate-wise kernels on one range (numpy, no torch: they run in forked workers)
# ---------------------------------------------------------------------------------------------


def _batcher_pairs(n: int) -> list[tuple[int, int]]:
    """Batcher's odd-even merge sort network for ``n`` inputs (comparators past ``n`` dropped)."""
    size = 1 << max(0, (n - 1).bit_length())
    pairs: list[tuple[int, int]] = []

    def merge(lo: int, length: int, r: int) -> None:
        step = r * 2
        if step < length:
            merge(lo, length, step)
            merge(lo + r, length, step)
            pairs.extend((i, i + r) for i in range(lo + r, lo + length - r, step))
        else:
            pairs.append((lo, lo + r))

    def sort(lo: int, length: int) -> None:
        if length > 1:
            half = length // 2
            sort(lo, half)
            sort(lo + half, half)
            merge(lo, length, 1)

    sort(0, size)
    return [(a, b) for a, b in pairs if b < n]


_Comparator = tuple[int, int, bool, bool]  # (a, b, whether rows[a] = min is needed, rows[b] = max)
_NETWORKS: dict[tuple[int, int, int], list[_Comparator]] = {}


def _network(n: int, lo: int, hi: int) -> list[_Comparator]:
    """Batcher's network for ``n`` inputs pruned to the outputs ``lo .. hi-1``: a comparator none
    of whose outputs reaches them is dropped, and one with a single output that does computes
    only that one (for the median of 8: 30 instead of 38 min/max passes; the same values)."""
    key = (n, lo, hi)
    if key not in _NETWORKS:
        needed = set(range(lo, hi))
        kept: list[_Comparator] = []
        for a, b in reversed(_batcher_pairs(n)):
            want_min, want_max = a in needed, b in needed
            if want_min or want_max:
                kept.append((a, b, want_min, want_max))
                needed |= {a, b}
        _NETWORKS[key] = kept[::-1]
    return _NETWORKS[key]


def sorted_rows(x: np.ndarray, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Rows ``lo .. hi-1`` of ``np.sort(x, axis=0)`` for int64 ``[n, L]``, by a sorting network
    in cache-sized blocks for small ``n`` (several times faster than numpy's strided sort;
    integers sort to one answer, so the result is the same)."""
    n, length = x.shape
    hi = n if hi is None else hi
    if n == 1:
        return x[lo:hi].copy()
    if n > _NETWORK_MAX_INPUTS:
        return np.sort(x, axis=0)[lo:hi]
    network = _network(n, lo, hi)
    out = np.empty((hi - lo, length), dtype=np.int64)
    for s in range(0, length, _SORT_BLOCK):
        rows = [x[i, s : s + _SORT_BLOCK].copy() for i in range(n)]
        scratch = np.empty_like(rows[0])
        for a, b, want_min, want_max in network:
            if want_min:
                np.minimum(rows[a], rows[b], out=scratch)
            if want_max:
                np.maximum(rows[a], rows[b], out=rows[b])
            if want_min:
                rows[a], scratch = scratch, rows[a]
        for i in range(lo, hi):
            out[i - lo, s : s + _SORT_BLOCK] = rows[i]
    return out


def floor_mean_rows(x: np.ndarray) -> np.ndarray:
    """``floor(sum / n)`` over axis 0."""
    mean: np.ndarray = np.sum(x, axis=0) // x.shape[0]
    return mean


def median_rows(x: np.ndarray) -> np.ndarray:
    """Middle value per coordinate; ``floor((a + b) / 2)`` of the two middle ones for even ``n``."""
    n = x.shape[0]
    if n % 2:
        middle: np.ndarray = sorted_rows(x, n // 2, n // 2 + 1)[0]
        return middle
    s = sorted_rows(x, n // 2 - 1, n // 2 + 1)
    mid: np.ndarray = (s[0] + s[1]) >> 1
    return mid


def trimmed_mean_rows(x: np.ndarray, t: int) -> np.ndarray:
    """Floor mean of sorted rows ``t .. n - t - 1``."""
    n = x.shape[0]
    return floor_mean_rows(sorted_rows(x, t, n - t) if t else x)


def range_sq_distances(x: np.ndarray) -> list[list[int]]:
    """Exact squared distances on ``x >> DIST_SHIFT`` summed over a range's chunks (Python ints).

    Per chunk every entry is below ``2**60`` in int64 (see :mod:`syncline.protocol.aggregation`),
    then :func:`exact_sum` adds the chunks without overflow.
    """
    n = x.shape[0]
    y = pad_chunks(x >> DIST_SHIFT).transpose(1, 0, 2)  # [chunks, n, CHUNK_SIZE]
    gram = np.matmul(y, y.transpose(0, 2, 1))  # [chunks, n, n], exact int64
    sq = np.diagonal(gram, axis1=1, axis2=2)
    dist = sq[:, :, None] + sq[:, None, :] - 2 * gram
    total = exact_sum(dist.transpose(1, 2, 0), axis=2)
    return [[int(total[i, j]) for j in range(n)] for i in range(n)]


def range_sq_norms(z: np.ndarray) -> list[int]:
    """Exact ``sum (z >> DIST_SHIFT)**2`` per row over a range's chunks (Python ints)."""
    y = pad_chunks(z >> DIST_SHIFT)
    return [int(v) for v in exact_sum(np.einsum("nck,nck->nc", y, y), axis=1)]


# ---------------------------------------------------------------------------------------------
# The passes
# ---------------------------------------------------------------------------------------------


@dataclass
class _Job:
    """Everything a pass needs (forked workers inherit it)."""

    numel: int
    gradients: Sequence[GradientInput]
    weights: Region
    momentum: Region
    out_weights: Region
    out_momentum: Region
    lr_q: int
    mom_q: int
    scratch: Region | None = None


def _inputs(job: _Job, first: int, last: int) -> np.ndarray:
    start, stop = first * CHUNK_SIZE, min(last * CHUNK_SIZE, job.numel)
    x = np.empty((len(job.gradients), stop - start), dtype=np.int64)
    for row, g in enumerate(job.gradients):
        g.dequantized(first, last, job.numel, out=x[row])
    return x


def _bounds(job: _Job, first: int, last: int) -> tuple[int, int]:
    return first * CHUNK_SIZE, min(last * CHUNK_SIZE, job.numel)


def _clipped_mean(x: np.ndarray, v: np.ndarray, factors: Sequence[int]) -> np.ndarray:
    z = x - v
    np.multiply(z, np.array(factors, dtype=np.int64)[:, None], out=z)
    np.right_shift(z, CLIP_FACTOR_BITS, out=z)
    out: np.ndarray = v + floor_mean_rows(z)
    return out


def _aggregate(job: _Job, x: np.ndarray, first: int, last: int, how: tuple[Any, ...]) -> np.ndarray:
    kind = how[0]
    if kind == "mean":
        return floor_mean_rows(x)
    if kind == "trimmed":
        return trimmed_mean_rows(x, how[1])
    if kind == "median":
        return median_rows(x)
    if kind == "rows":
        return floor_mean_rows(x[list(how[1])])
    if kind == "clip":
        assert job.scratch is not None
        return _clipped_mean(x, job.scratch.read(*_bounds(job, first, last)), how[1])
    raise ValueError(f"unknown aggregation {kind!r}")


def _pass_distances(job: _Job, span: tuple[int, int]) -> list[list[int]]:
    return range_sq_distances(_inputs(job, *span))


def _pass_clip(job: _Job, args: tuple[int, int, tuple[int, ...] | None]) -> list[int]:
    """``v_t`` for one range (median when ``factors`` is None) and the norms of ``x - v_t``."""
    first, last, factors = args
    assert job.scratch is not None
    x = _inputs(job, first, last)
    start, stop = _bounds(job, first, last)
    v = median_rows(x) if factors is None else _clipped_mean(x, job.scratch.read(start, stop), factors)
    job.scratch.write(start, v)
    return range_sq_norms(x - v)


def _pass_finish(job: _Job, args: tuple[int, int, tuple[Any, ...]]) -> tuple[bytes, bytes]:
    """Aggregate, outer step, write the new state and hash: the range's two subtree roots."""
    first, last, how = args
    start, stop = _bounds(job, first, last)
    aggregate = _aggregate(job, _inputs(job, first, last), first, last, how)
    theta = job.weights.read(start, stop)
    momentum = job.momentum.read(start, stop)
    if any(v.max() > STATE_MAX or v.min() < -STATE_MAX for v in (theta, momentum)):  # no temporaries
        raise ValueError(f"state out of bounds in coordinates {start}..{stop}")
    new_theta, new_momentum = nesterov_arrays(theta, momentum, aggregate, job.lr_q, job.mom_q)
    job.out_weights.write(start, new_theta)
    job.out_momentum.write(start, new_momentum)
    state_hashes = hash_rows(*state_chunk_buffer(new_theta, new_momentum))
    aggregate_hashes = hash_rows(*aggregate_chunk_buffer(aggregate))
    return merkle.block_root(state_hashes, first), merkle.block_root(aggregate_hashes, first)


def aggregate_chunk_buffer(aggregate: np.ndarray) -> tuple[memoryview, int, int]:
    """Aggregate chunk contents (int64 big-endian, ``CHUNK_SIZE`` values each) end to end."""
    numel = int(aggregate.shape[0])
    last = 8 * (numel - (num_chunks(numel) - 1) * CHUNK_SIZE)
    return aggregate.astype(">i8").view(np.uint8).data, 8 * CHUNK_SIZE, last


# ---------------------------------------------------------------------------------------------
# The round
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamedRound:
    """The commitments of a streamed round (the new state is in the caller's output regions)."""

    state_root: bytes
    aggregate_root: bytes
    selected: tuple[int, ...]
    scores: tuple[int, ...] | None = None


def default_workers(numel: int) -> int:
    """Processes for a round of ``numel`` coordinates: one below :data:`PARALLEL_MIN_NUMEL`,
    else the usable CPUs (``SYNCLINE_ROUND_WORKERS`` overrides)."""
    if "SYNCLINE_ROUND_WORKERS" in os.environ:
        return max(1, int(os.environ["SYNCLINE_ROUND_WORKERS"]))
    if numel < PARALLEL_MIN_NUMEL:
        return 1
    return max(1, len(os.sched_getaffinity(0)))


def stream_round(
    weights: Region,
    momentum: Region,
    gradients: Sequence[GradientInput],
    rule: AggregationRuleImpl,
    lr_ppm: int,
    mom_ppm: int,
    *,
    out_weights: Region,
    out_momentum: Region,
    range_chunks: int = DEFAULT_RANGE_CHUNKS,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> StreamedRound:
    """Aggregate ``gradients`` (valid, in ascending fragment order) with ``rule``, apply the
    outer step to ``weights``/``momentum`` and write the new state to ``out_weights`` /
    ``out_momentum`` (they may be the inputs), ``range_chunks`` chunks at a time.

    ``rule`` must be able to run on ``len(gradients)`` inputs (the caller falls back to the
    median for Krum with too few). ``progress`` is called with the coordinates done per range
    of the last pass. Raises ValueError on inconsistent sizes.
    """
    n = len(gradients)
    if not 1 <= n <= 64:
        raise ValueError(f"a round aggregates 1..64 gradients, got {n}")
    if range_chunks < 1 or range_chunks & (range_chunks - 1):
        raise ValueError(f"range_chunks must be a power of two, got {range_chunks}")
    numel = weights.numel
    for name, region in (("momentum", momentum), ("out_weights", out_weights), ("out_momentum", out_momentum)):
        if region.numel != numel:
            raise ValueError(f"{name} has {region.numel} coordinates, weights have {numel}")
    for g in gradients:
        if g.values.numel != numel or g.exponents.shape[0] != num_chunks(numel):
            raise ValueError("a gradient's size differs from the state's")
    lr_q, mom_q = coefficients(lr_ppm, mom_ppm)
    workers = default_workers(numel) if workers is None else max(1, workers)
    spans = [(f, min(f + range_chunks, num_chunks(numel))) for f in range(0, num_chunks(numel), range_chunks)]
    workers = min(workers, len(spans))
    if workers > 1 and not all(_shared(r) for r in (out_weights, out_momentum)):
        raise ValueError("outputs written by worker processes must be shared_region() or FileRegion")
    scratch: Region | None = shared_region(numel) if isinstance(rule, CenteredClip) and rule.iterations else None
    job = _Job(numel, gradients, weights, momentum, out_weights, out_momentum, lr_q, mom_q, scratch)

    def run(fn: Callable[[_Job, Any], Any], args: Sequence[Any], on_result: Any = None) -> list[Any]:
        return fork_map(lambda a: fn(job, a), args, workers, on_result=on_result)

    selected: tuple[int, ...] = tuple(range(n))
    scores: tuple[int, ...] | None = None
    how: tuple[Any, ...]
    if isinstance(rule, Krum):
        dist = [[0] * n for _ in range(n)]
        for part in run(_pass_distances, spans):
            for i in range(n):
                for j in range(n):
                    dist[i][j] += part[i][j]
        score_list = krum_scores(dist, rule.f)
        order = sorted(range(n), key=lambda i: (score_list[i], i))
        selected = tuple(sorted(order[: n - rule.f])) if isinstance(rule, MultiKrum) else (order[0],)
        how, scores = ("rows", selected), tuple(score_list)
    elif isinstance(rule, CenteredClip):
        how = ("median",)
        if rule.iterations:
            tau = clip_radius_grid(rule.radius_ppm)
            factors: tuple[int, ...] | None = None
            for _ in range(rule.iterations):
                norms = [0] * n
                for part in run(_pass_clip, [(a, b, factors) for a, b in spans]):
                    norms = [s + p for s, p in zip(norms, part, strict=True)]
                factors = tuple(clip_factors([math.isqrt(s) << DIST_SHIFT for s in norms], tau))
            how = ("clip", factors)  # the last pass computes v_T from v_{T-1} and these
    elif isinstance(rule, TrimmedMean):
        how = ("trimmed", rule.trim_count(n))
    elif isinstance(rule, CoordinateMedian):
        how = ("median",)
    elif isinstance(rule, Mean):
        how = ("mean",)
    else:
        raise ValueError(f"no streaming implementation for {type(rule).__name__}")
    finish_args = [(a, b, how) for a, b in spans]

    def done(index: int, _: object) -> None:
        if progress is not None:
            a, b, _how = finish_args[index]
            progress(min(b * CHUNK_SIZE, numel) - a * CHUNK_SIZE)

    roots: list[tuple[bytes, bytes]] = run(_pass_finish, finish_args, done)
    return StreamedRound(
        merkle.root_of_blocks([r[0] for r in roots]),
        merkle.root_of_blocks([r[1] for r in roots]),
        selected,
        scores,
    )


def _shared(region: Region) -> bool:
    return isinstance(region, FileRegion) or (isinstance(region, ArrayRegion) and region.shared)


__all__ = [
    "ArrayRegion",
    "FileRegion",
    "GradientInput",
    "Region",
    "StreamedRound",
    "shared_region",
    "stream_round",
]
