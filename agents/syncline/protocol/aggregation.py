"""Robust aggregation rules in exact int64 arithmetic on the Q32 grid.

Every rule maps ``inputs: int64 [n, d]`` (one dequantized outer gradient per row, ``1 <= n``,
``|x| < 2**41``) to ``int64 [d]``. All divisions are floors; sorting is over integers; distances
and norms are exact integers. Results are therefore bit-identical on every machine and thread
count, and a contract can recompute any rule on one chunk.

Rules (``rule_param`` as stored on chain)
-----------------------------------------
Mean
    ``floor(sum / n)``.
TrimmedMean(beta_bps)
    ``t = floor(beta_bps * n / 10000)``; sort each coordinate; floor mean of sorted rows
    ``t .. n-t-1``. Needs ``0 <= beta_bps < 5000``.
CoordinateMedian
    Sort; odd ``n``: the middle value; even ``n``: ``floor((a + b) / 2)`` of the two middle ones.
Krum(f)
    ``y = x >> DIST_SHIFT`` (floor). Squared distances ``D[i][j] = sum_k (y_ik - y_jk)**2`` are
    computed per chunk in int64 and summed across chunks exactly as Python ints. ``score_i`` is
    the sum of the ``n - f - 2`` smallest ``D[i][j]`` (``j != i``); the row with the lowest score
    is selected (ties: lowest index) and returned. Needs ``n >= 2f + 3``.
MultiKrum(f)
    Same scores; the ``n - f`` rows with the lowest ``(score, index)`` are selected and their
    floor mean is returned.
CenteredClip(radius_ppm, iterations=3)
    ``v = CoordinateMedian``; then per iteration, for each row ``z_i = x_i - v``,
    ``norm_i = isqrt(sum_k (z_ik >> DIST_SHIFT)**2) << DIST_SHIFT``,
    ``tau = (radius_ppm << 32) // 10**6``, ``factor_i = min(2**20, (tau << 20) // max(norm_i, 1))``,
    ``clipped_i = (z_i * factor_i) >> 20`` and ``v += floor(mean_i clipped_i)``. The clipped
    mean bounds how far ``f`` attackers can drag ``v`` per iteration (``f * tau / n`` in L2),
    which is the defence against inner-product-manipulation and "a little is enough" attacks.

Overflow bounds
---------------
With ``|x| < 2**41``: ``|y| <= 2**25``, ``|y_i - y_j| <= 2**26``, a squared difference is at most
``2**52`` and a per-chunk partial at most ``256 * 2**52 = 2**60 < 2**63``. CenteredClip keeps
``v`` inside the inputs' coordinate hull (each ``clipped_i`` lies between 0 and ``z_i``), so
``|z| < 2**42``, ``|z >> 16| <= 2**26`` (same per-chunk bound) and ``|z * factor| < 2**62``.
Totals across chunks can exceed int64, so they are exact Python ints (see
:func:`syncline.protocol.fixed_point.exact_sum`). Sums of at most 64 rows stay below 2**47.

Implementation: element-wise work and sorts run on zero-copy numpy views (faster than torch's
int64 kernels on CPU); Krum's per-chunk distances use an int64 ``torch.bmm`` Gram matrix,
``D_ij = G_ii + G_jj - 2 G_ij``, exact because every term is below 2**60. Integer results do not
depend on the order of summation, hence not on threads or libraries.

The per-chunk partials (:func:`chunk_sq_distances`, :func:`chunk_sq_norms`) are public and pure
so that fraud proofs can commit to them later.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from syncline.protocol.enums import AggregationRule
from syncline.protocol.fixed_point import (
    CHUNK_SIZE,
    FRAC_BITS,
    PPM,
    as_numpy,
    check_abs_bound,
    check_int64,
    exact_sum,
    num_chunks,
    pad_chunks,
)

DIST_SHIFT = 16
INPUT_BOUND_BITS = 41
MAX_INPUTS = 64
BPS = 10_000
CLIP_FACTOR_BITS = 20
CLIP_ITERATIONS = 3
_BLOCK_ENTRIES = 1 << 22  # cap on chunk x n x n entries held at once by the distance kernel

IntArray = np.ndarray  # int64 numpy arrays (zero-copy views of the torch inputs)


@dataclass(frozen=True, eq=False)
class AggregationResult:
    """The aggregate and, for the selection rules, which rows were used and their scores."""

    aggregate: torch.Tensor
    selected: tuple[int, ...]
    scores: tuple[int, ...] | None = None


def validate_inputs(inputs: torch.Tensor) -> None:
    """Raise ValueError unless ``inputs`` is int64 ``[n, d]``, ``1 <= n <= 64``, ``d >= 1``, ``|x| < 2**41``."""
    check_int64(inputs, "aggregation inputs", ndim=2)
    n, d = inputs.shape
    if not 1 <= n <= MAX_INPUTS or d < 1:
        raise ValueError(f"aggregation needs 1..{MAX_INPUTS} inputs of >= 1 coordinate, got shape {(n, d)}")
    check_abs_bound(inputs, 1 << INPUT_BOUND_BITS, "aggregation inputs")


def _t(a: IntArray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def floor_mean(rows: IntArray) -> IntArray:
    """``floor(sum(rows) / len(rows))`` over axis 0 (numpy ``//`` floors)."""
    mean: IntArray = np.sum(rows, axis=0) // rows.shape[0]
    return mean


def chunk_sq_distances(inputs: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Per-chunk squared L2 distances on ``x >> DIST_SHIFT`` for chunks ``start .. stop-1``.

    ``D[i, j, c] = sum over the coordinates k of chunk c of ((x_ik >> 16) - (x_jk >> 16))**2``,
    computed as ``G_ii + G_jj - 2 G_ij`` from the per-chunk Gram matrix (``torch.bmm`` on int64;
    every intermediate is at most ``2**59`` in magnitude, so the result is exact and independent
    of summation order).

    Returns
    -------
    torch.Tensor
        int64 ``[n, n, stop - start]``, symmetric with a zero diagonal, entries ``<= 2**60``.
    """
    d = inputs.shape[1]
    stop = num_chunks(d) if stop is None else stop
    if not 0 <= start < stop <= num_chunks(d):
        raise ValueError(f"chunk range {start}..{stop} out of 0..{num_chunks(d)}")
    cols = as_numpy(inputs)[:, start * CHUNK_SIZE : min(d, stop * CHUNK_SIZE)]
    y = torch.from_numpy(pad_chunks(cols >> DIST_SHIFT)).permute(1, 0, 2)  # [chunks, n, CHUNK_SIZE]
    gram = torch.bmm(y, y.transpose(1, 2))
    sq = torch.diagonal(gram, dim1=1, dim2=2)
    dist = sq.unsqueeze(2) + sq.unsqueeze(1) - 2 * gram
    return dist.permute(1, 2, 0).contiguous()


def pairwise_sq_distances(inputs: torch.Tensor) -> list[list[int]]:
    """Exact total squared distances (Python ints): the sum over all chunks of :func:`chunk_sq_distances`."""
    n, d = inputs.shape
    c = num_chunks(d)
    block = max(1, _BLOCK_ENTRIES // (n * n))
    total = np.zeros((n, n), dtype=object)
    for start in range(0, c, block):
        total = total + exact_sum(chunk_sq_distances(inputs, start, min(c, start + block)).numpy(), axis=2)
    return [[int(v) for v in row] for row in total]


def krum_scores(dist: list[list[int]], f: int) -> list[int]:
    """``score_i`` = sum of the ``n - f - 2`` smallest distances from ``i`` to the others."""
    n = len(dist)
    if f < 0 or n < 2 * f + 3:
        raise ValueError(f"Krum with f={f} needs n >= 2f + 3 = {2 * f + 3} inputs, got {n}")
    keep = n - f - 2
    return [sum(sorted(dist[i][j] for j in range(n) if j != i)[:keep]) for i in range(n)]


def chunk_sq_norms(z: torch.Tensor) -> torch.Tensor:
    """Per-chunk ``sum (z >> DIST_SHIFT)**2`` of each row (int64 ``[n, num_chunks]``, entries ``<= 2**60``)."""
    return torch.from_numpy(_chunk_sq_norms(as_numpy(z)))


def _chunk_sq_norms(z: IntArray) -> IntArray:
    y = pad_chunks(z >> DIST_SHIFT)
    norms: IntArray = np.einsum("nck,nck->nc", y, y)
    return norms


def clip_norms(z: torch.Tensor) -> list[int]:
    """``isqrt(sum (z >> DIST_SHIFT)**2) << DIST_SHIFT`` per row, exact."""
    return [math.isqrt(int(t)) << DIST_SHIFT for t in exact_sum(_chunk_sq_norms(as_numpy(z)), axis=1)]


def clip_radius_grid(radius_ppm: int) -> int:
    """Clip radius on the Q32 grid: ``(radius_ppm << 32) // 10**6``."""
    return (radius_ppm << FRAC_BITS) // PPM


def clip_factors(norms: list[int], tau: int) -> list[int]:
    """``min(2**20, (tau << 20) // max(norm, 1))`` per row."""
    one = 1 << CLIP_FACTOR_BITS
    return [min(one, (tau << CLIP_FACTOR_BITS) // max(norm, 1)) for norm in norms]


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """Middle value per coordinate; ``floor((a + b) / 2)`` of the two middle ones for even ``n``."""
    return _t(_median(as_numpy(x)))


def _median(x: IntArray) -> IntArray:
    n = x.shape[0]
    s = np.sort(x, axis=0)
    if n % 2:
        middle: IntArray = s[n // 2].copy()
        return middle
    mid: IntArray = (s[n // 2 - 1] + s[n // 2]) >> 1
    return mid


class AggregationRuleImpl(ABC):
    """One aggregation rule; :meth:`aggregate` validates the inputs then applies it."""

    rule: AggregationRule

    def aggregate(self, inputs: torch.Tensor) -> torch.Tensor:
        """Aggregate ``int64 [n, d]`` into ``int64 [d]``."""
        return self.aggregate_with_info(inputs).aggregate

    def aggregate_with_info(self, inputs: torch.Tensor) -> AggregationResult:
        """Like :meth:`aggregate`, also returning selected rows and scores."""
        validate_inputs(inputs)
        return self._aggregate(inputs)

    @abstractmethod
    def _aggregate(self, x: torch.Tensor) -> AggregationResult: ...


def _all(n: int) -> tuple[int, ...]:
    return tuple(range(n))


class Mean(AggregationRuleImpl):
    """Floor mean of all rows."""

    rule = AggregationRule.MEAN

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        return AggregationResult(_t(floor_mean(as_numpy(x))), _all(x.shape[0]))


class TrimmedMean(AggregationRuleImpl):
    """Drop the ``t`` smallest and ``t`` largest values per coordinate, floor-mean the rest."""

    rule = AggregationRule.TRIMMED_MEAN

    def __init__(self, beta_bps: int) -> None:
        if not 0 <= beta_bps < BPS // 2:
            raise ValueError(f"trimmed mean needs 0 <= beta_bps < {BPS // 2}, got {beta_bps}")
        self.beta_bps = beta_bps

    def trim_count(self, n: int) -> int:
        """``t = floor(beta_bps * n / 10000)`` (always ``2t < n``)."""
        return self.beta_bps * n // BPS

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        n = x.shape[0]
        t = self.trim_count(n)
        kept = np.sort(as_numpy(x), axis=0)[t : n - t] if t else as_numpy(x)
        return AggregationResult(_t(floor_mean(kept)), _all(n))


class CoordinateMedian(AggregationRuleImpl):
    """Coordinate-wise median."""

    rule = AggregationRule.COORDINATE_MEDIAN

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        return AggregationResult(coordinate_median(x), _all(x.shape[0]))


class Krum(AggregationRuleImpl):
    """Select the single row with the lowest Krum score."""

    rule = AggregationRule.KRUM

    def __init__(self, f: int) -> None:
        if f < 0:
            raise ValueError(f"Krum needs f >= 0, got {f}")
        self.f = f

    def scores(self, x: torch.Tensor) -> list[int]:
        """Krum score of every row (checks ``n >= 2f + 3`` before computing distances)."""
        n = x.shape[0]
        if n < 2 * self.f + 3:
            raise ValueError(f"Krum with f={self.f} needs n >= 2f + 3 = {2 * self.f + 3} inputs, got {n}")
        return krum_scores(pairwise_sq_distances(x), self.f)

    def _ranking(self, x: torch.Tensor) -> tuple[list[int], list[int]]:
        scores = self.scores(x)
        return sorted(range(len(scores)), key=lambda i: (scores[i], i)), scores

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        order, scores = self._ranking(x)
        best = order[0]
        return AggregationResult(x[best].clone(), (best,), tuple(scores))


class MultiKrum(Krum):
    """Floor mean of the ``n - f`` rows with the lowest Krum scores."""

    rule = AggregationRule.MULTI_KRUM

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        order, scores = self._ranking(x)
        chosen = tuple(sorted(order[: x.shape[0] - self.f]))
        return AggregationResult(_t(floor_mean(as_numpy(x)[list(chosen)])), chosen, tuple(scores))


class CenteredClip(AggregationRuleImpl):
    """Iterative centered clipping around the coordinate median."""

    rule = AggregationRule.CENTERED_CLIP

    def __init__(self, radius_ppm: int, iterations: int = CLIP_ITERATIONS) -> None:
        if not 0 < radius_ppm < 1 << 32:
            raise ValueError(f"centered clip needs 0 < radius_ppm < 2**32, got {radius_ppm}")
        if iterations < 0:
            raise ValueError(f"centered clip needs iterations >= 0, got {iterations}")
        self.radius_ppm = radius_ppm
        self.iterations = iterations

    def _aggregate(self, x: torch.Tensor) -> AggregationResult:
        xs = as_numpy(x)
        tau = clip_radius_grid(self.radius_ppm)
        v = _median(xs)
        z = np.empty_like(xs)
        for _ in range(self.iterations):
            np.subtract(xs, v, out=z)
            norms = [math.isqrt(int(t)) << DIST_SHIFT for t in exact_sum(_chunk_sq_norms(z), axis=1)]
            factors = np.array(clip_factors(norms, tau), dtype=np.int64)[:, None]
            np.multiply(z, factors, out=z)
            np.right_shift(z, CLIP_FACTOR_BITS, out=z)
            v = v + floor_mean(z)
        return AggregationResult(_t(v), _all(x.shape[0]))


def make_rule(rule: AggregationRule, rule_param: int) -> AggregationRuleImpl:
    """Build the rule the chain names, with its ``rule_param`` (bps, f or radius ppm; 0 otherwise)."""
    rule = AggregationRule(rule)
    if rule == AggregationRule.TRIMMED_MEAN:
        return TrimmedMean(rule_param)
    if rule == AggregationRule.KRUM:
        return Krum(rule_param)
    if rule == AggregationRule.MULTI_KRUM:
        return MultiKrum(rule_param)
    if rule == AggregationRule.CENTERED_CLIP:
        return CenteredClip(rule_param)
    if rule_param != 0:
        raise ValueError(f"{rule.name.lower()} takes no parameter, got {rule_param}")
    return Mean() if rule == AggregationRule.MEAN else CoordinateMedian()
