"""Exact aggregation rules: float64 references, invariances, robustness and input validation.

Bounds checked against the float64 references (one grid unit = 2**-32):

* Mean, TrimmedMean: the result is the floor of the exact mean, so ``0 <= ref - out < 1``
  (plus float64 rounding of the reference, far below a unit at these magnitudes).
* CoordinateMedian: ``ref - out`` is 0 (odd n) or in ``[0, 1)`` (even n, floor of a midpoint).
* Krum / Multi-Krum: with ``|x >> 16| < 2**20`` and ``d <= 600`` the float64 reference on the
  shifted values is exact, so the selection must match exactly (ties: lowest index).
* CenteredClip: without clipping it equals Mean exactly; with clipping the integer run differs
  from the real-valued algorithm only through the DIST_SHIFT truncation of norms (relative error
  ``<= (sqrt(d) + 1) * 2**16 / norm``) and the 2**-20 factor grid, so
  ``|out - ref| <= 2**-14 * max|x| + 16`` for the inputs used here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from syncline.protocol import aggregation as agg
from syncline.protocol.enums import AggregationRule

BOUND = 1 << 41


# ------------------------------------------------------------------------ float64 references


def ref_mean(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x.astype(np.float64).mean(axis=0)
    return out


def ref_trimmed(x: np.ndarray, beta_bps: int) -> np.ndarray:
    n = x.shape[0]
    t = beta_bps * n // 10_000
    out: np.ndarray = np.sort(x.astype(np.float64), axis=0)[t : n - t].mean(axis=0)
    return out


def ref_median(x: np.ndarray) -> np.ndarray:
    return np.median(x.astype(np.float64), axis=0)


def ref_krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    y = (x >> 16).astype(np.float64)
    d = ((y[:, None, :] - y[None, :, :]) ** 2).sum(axis=2)
    n = x.shape[0]
    return np.array([np.sort(np.delete(d[i], i))[: n - f - 2].sum() for i in range(n)])


def ref_centered_clip(x: np.ndarray, radius: float, iterations: int = 3) -> np.ndarray:
    xf = x.astype(np.float64) / 2**32
    v = np.median(xf, axis=0)
    for _ in range(iterations):
        z = xf - v
        norms = np.linalg.norm(z, axis=1)
        factors = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
        v = v + (z * factors[:, None]).mean(axis=0)
    return v * 2**32


# ------------------------------------------------------------------------ input strategies


def make_inputs(seed: int, n: int, d: int, log2_mag: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    hi = min(1 << log2_mag, BOUND - 1)
    x = rng.integers(-hi, hi, size=(n, d), endpoint=True, dtype=np.int64)
    return torch.from_numpy(x)


inputs_st = st.builds(
    make_inputs, st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 600), st.integers(0, 41)
)
tie_inputs_st = st.builds(  # tiny alphabet: many ties between coordinates and between rows
    lambda seed, n, d: torch.from_numpy(np.random.default_rng(seed).integers(-2, 2, (n, d), endpoint=True)),
    st.integers(0, 2**32 - 1),
    st.integers(1, 9),
    st.integers(1, 300),
)


def floor_gap(out: torch.Tensor, ref: np.ndarray) -> np.ndarray:
    return ref - out.numpy().astype(np.float64)


# ------------------------------------------------------------------------ agreement with references


@given(st.one_of(inputs_st, tie_inputs_st))
@settings(max_examples=60)
def test_mean_is_floor_of_exact_mean(x: torch.Tensor) -> None:
    out = agg.Mean().aggregate(x)
    n = x.shape[0]
    assert out.tolist() == [sum(col) // n for col in zip(*x.tolist(), strict=True)]
    gap = floor_gap(out, ref_mean(x.numpy()))
    assert gap.min() >= -1e-3 and gap.max() < 1 + 1e-3


@given(st.one_of(inputs_st, tie_inputs_st), st.integers(0, 4999))
@settings(max_examples=60)
def test_trimmed_mean_matches_reference(x: torch.Tensor, beta: int) -> None:
    out = agg.TrimmedMean(beta).aggregate(x)
    gap = floor_gap(out, ref_trimmed(x.numpy(), beta))
    assert gap.min() >= -1e-3 and gap.max() < 1 + 1e-3


@given(st.one_of(inputs_st, tie_inputs_st))
@settings(max_examples=60)
def test_median_matches_reference(x: torch.Tensor) -> None:
    out = agg.CoordinateMedian().aggregate(x)
    gap = floor_gap(out, ref_median(x.numpy()))
    if x.shape[0] % 2:
        assert not gap.any()
    assert gap.min() >= 0 and gap.max() <= 0.5


@given(st.integers(0, 2**32 - 1), st.integers(0, 3), st.integers(1, 600))
@settings(max_examples=40)
def test_krum_and_multikrum_match_reference(seed: int, f: int, d: int) -> None:
    n = 2 * f + 3 + seed % 4
    x = make_inputs(seed, n, d, 36)  # |x >> 16| < 2**20: float64 reference is exact
    scores = ref_krum_scores(x.numpy(), f)
    res = agg.Krum(f).aggregate_with_info(x)
    assert res.scores is not None and list(res.scores) == [int(s) for s in scores]
    assert res.selected == (int(np.argmin(scores)),)  # argmin returns the lowest index on ties
    assert torch.equal(res.aggregate, x[res.selected[0]])
    multi = agg.MultiKrum(f).aggregate_with_info(x)
    chosen = sorted(np.argsort(scores, kind="stable")[: n - f].tolist())
    assert multi.selected == tuple(chosen)
    gap = floor_gap(multi.aggregate, ref_mean(x.numpy()[chosen]))
    assert gap.min() >= -1e-3 and gap.max() < 1 + 1e-3


def test_krum_ties_go_to_the_lowest_index() -> None:
    x = torch.zeros(5, 4, dtype=torch.int64)
    assert agg.Krum(1).aggregate_with_info(x).selected == (0,)
    # Rows 1 and 3 are identical and closest to everything: both tie, 1 wins.
    x = torch.tensor([[10], [1], [-10], [1], [30]], dtype=torch.int64) << 20
    assert agg.Krum(1).aggregate_with_info(x).selected == (1,)
    assert agg.MultiKrum(1).aggregate_with_info(x).selected == (0, 1, 2, 3)


def test_centered_clip_without_clipping_equals_mean() -> None:
    for seed in range(5):
        x = make_inputs(seed, 3 + seed, 256 + 7 * seed, 36)
        # radius ~ 4295 (real) -> tau ~ 2**44 exceeds every norm here, so every factor is 2**20.
        assert torch.equal(agg.CenteredClip(2**32 - 1).aggregate(x), agg.Mean().aggregate(x))


@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.integers(1, 64), st.sampled_from([0.05, 0.3, 1.0, 8.0]))
@settings(max_examples=50)
def test_centered_clip_matches_real_valued_algorithm(seed: int, n: int, d: int, radius: float) -> None:
    x = make_inputs(seed, n, d, 34)  # values up to 4.0 (real); radius below and above the spread
    out = agg.CenteredClip(round(radius * 1e6)).aggregate(x).numpy().astype(np.float64)
    ref = ref_centered_clip(x.numpy(), radius)
    tol = 2.0**-14 * float(np.abs(x.numpy()).max()) + 16
    assert np.abs(out - ref).max() <= tol


# ------------------------------------------------------------------------ invariances


ALL_RULES: list[Callable[[], agg.AggregationRuleImpl]] = [
    agg.Mean,
    lambda: agg.TrimmedMean(2500),
    agg.CoordinateMedian,
    lambda: agg.CenteredClip(300_000),
]


@given(st.one_of(inputs_st, tie_inputs_st), st.randoms(use_true_random=False))
@settings(max_examples=40)
def test_permutation_invariance(x: torch.Tensor, rnd: object) -> None:
    perm = list(range(x.shape[0]))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    for make in ALL_RULES:
        rule = make()
        assert torch.equal(rule.aggregate(x), rule.aggregate(x[perm])), rule


@given(st.integers(0, 2**32 - 1), st.integers(0, 2), st.randoms(use_true_random=False))
@settings(max_examples=30)
def test_krum_permutation_invariance_without_ties(seed: int, f: int, rnd: object) -> None:
    n = 2 * f + 3 + seed % 3
    x = make_inputs(seed, n, 300, 40)
    scores = agg.Krum(f).scores(x)
    assume(len(set(scores)) == n)  # distinct scores: the selection is order independent
    perm = list(range(n))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    assert torch.equal(agg.Krum(f).aggregate(x), agg.Krum(f).aggregate(x[perm]))
    assert torch.equal(agg.MultiKrum(f).aggregate(x), agg.MultiKrum(f).aggregate(x[perm]))


# ------------------------------------------------------------------------ robustness


def attacked(seed: int, honest: int, byzantine: int, d: int, attack: str) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    center = rng.integers(-(2**33), 2**33, size=d)
    h = center + rng.integers(-(2**30), 2**30, size=(honest, d))
    if attack == "huge":
        b = np.where(rng.random((byzantine, d)) < 0.5, BOUND - 1, -(BOUND - 1))
    elif attack == "same_huge":  # colluding attackers agree on one far point
        b = np.tile(np.full(d, BOUND - 1), (byzantine, 1))
    else:  # "a little is enough": shift every coordinate by 1.5 honest std devs
        b = np.tile((h.mean(0) - 1.5 * h.std(0)).astype(np.int64), (byzantine, 1))
    x = np.concatenate([h, b])
    return torch.from_numpy(x[rng.permutation(len(x))] if attack == "alie" else x)


ATTACKS = ["huge", "same_huge"]


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize(("honest", "byzantine"), [(7, 3), (6, 2), (10, 3)])
def test_trimmed_mean_and_median_stay_in_the_honest_range(attack: str, honest: int, byzantine: int) -> None:
    x = attacked(honest * 31 + byzantine, honest, byzantine, 700, attack)
    h = x[:honest]
    lo, hi = h.min(0).values, h.max(0).values
    n = honest + byzantine
    beta = -(-byzantine * 10_000 // n)  # smallest beta with t >= f
    for out in (agg.TrimmedMean(beta).aggregate(x), agg.CoordinateMedian().aggregate(x)):
        assert bool(((out >= lo) & (out <= hi)).all())
    # Sanity: the attack does wreck the plain mean.
    assert int((agg.Mean().aggregate(x) - h.float().mean(0).long()).abs().max()) > 2**36


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize(("honest", "byzantine"), [(7, 2), (8, 3), (12, 4)])
def test_krum_never_selects_an_outlier(attack: str, honest: int, byzantine: int) -> None:
    x = attacked(honest * 17 + byzantine, honest, byzantine, 700, attack)
    f = byzantine
    assert agg.Krum(f).aggregate_with_info(x).selected[0] < honest
    multi = agg.MultiKrum(f).aggregate_with_info(x)
    assert all(i < honest for i in multi.selected) and len(multi.selected) == honest + byzantine - f


@pytest.mark.parametrize("attack", [*ATTACKS, "alie"])
@pytest.mark.parametrize(("honest", "byzantine"), [(7, 3), (12, 4), (5, 1)])
def test_centered_clip_bounds_the_attackers_pull(attack: str, honest: int, byzantine: int) -> None:
    """||v - c|| <= max(||median - c||, R_h) + T f tau / n (+ rounding), c the honest mean.

    Each iteration is v' - c = (1 - S/n)(v - c) + (1/n) sum_h s_i (x_i - c) + B with
    ||B|| <= f tau / n, so the distance to c never exceeds max(D0, R_h) plus f tau / n per step.
    """
    d = 700
    x = attacked(honest * 7 + byzantine, honest, byzantine, d, attack)
    n = honest + byzantine
    radius_ppm = 2_000_000
    tau = (radius_ppm << 32) // 10**6
    out = agg.CenteredClip(radius_ppm).aggregate(x).numpy().astype(np.float64)
    h = x[:honest].numpy().astype(np.float64) if attack != "alie" else None
    if h is None:  # alie rows are shuffled: recover the honest rows as those not equal to the attack row
        xs = x.numpy()
        counts = {tuple(r): 0 for r in xs}
        for r in xs:
            counts[tuple(r)] += 1
        h = np.array([r for r in xs if counts[tuple(r)] == 1], dtype=np.float64)
    c = h.mean(0)
    r_h = np.linalg.norm(h - c, axis=1).max()
    d0 = np.linalg.norm(agg.CoordinateMedian().aggregate(x).numpy() - c)
    slack = 3 * (math.sqrt(d) + 2) * 2**16 * (byzantine + 1)  # norm truncation and floors
    bound = max(d0, r_h) + 3 * byzantine * tau / n * 1.001 + slack
    assert np.linalg.norm(out - c) <= bound
    # And it is far better than the mean under the huge attacks.
    if attack != "alie":
        assert np.linalg.norm(agg.Mean().aggregate(x).numpy() - c) > 100 * bound


# ------------------------------------------------------------------------ exact partials


def test_chunk_partials_are_exact_at_the_input_bound() -> None:
    d = 9 * 256 + 5  # enough coordinates for the total distance to exceed int64
    top = BOUND - 1
    x = torch.tensor([[top] * d, [-top] * d, [top if i % 2 else -top for i in range(d)]], dtype=torch.int64)
    per_chunk = agg.chunk_sq_distances(x)
    assert per_chunk.shape == (3, 3, 10)
    rows = [[v >> 16 for v in r] for r in x.tolist()]
    for i in range(3):
        for j in range(3):
            expected = [
                sum((a - b) ** 2 for a, b in zip(rows[i][s : s + 256], rows[j][s : s + 256], strict=True))
                for s in range(0, d, 256)
            ]
            assert per_chunk[i, j].tolist() == expected
    total = d * (2**26 - 1) ** 2  # (2**25 - 1) - (-(2**25)) per coordinate
    assert total > 2**63 and agg.pairwise_sq_distances(x)[0][1] == total
    assert agg.chunk_sq_distances(x, 1, 3).tolist() == per_chunk[:, :, 1:3].tolist()
    norms = agg.chunk_sq_norms(x)
    assert norms[0].tolist() == [sum(v * v for v in rows[0][s : s + 256]) for s in range(0, d, 256)]
    assert agg.clip_norms(x)[1] == math.isqrt(d * 2**50) << 16  # (-top) >> 16 == -(2**25)


def test_clip_helpers() -> None:
    assert agg.clip_radius_grid(1_000_000) == 1 << 32
    assert agg.clip_radius_grid(1) == (1 << 32) // 10**6
    tau = 1 << 32
    assert agg.clip_factors([0, tau, 2 * tau, 3 * tau], tau) == [1 << 20, 1 << 20, 1 << 19, (1 << 20) // 3]


# ------------------------------------------------------------------------ validation and factory


@pytest.mark.parametrize(
    ("x", "reason"),
    [
        (torch.zeros(3, 4, dtype=torch.int32), "int64"),
        (torch.zeros(4, dtype=torch.int64), "2 dimension"),
        (torch.zeros(0, 4, dtype=torch.int64), "1..64 inputs"),
        (torch.zeros(65, 4, dtype=torch.int64), "1..64 inputs"),
        (torch.zeros(2, 0, dtype=torch.int64), "1..64 inputs"),
        (torch.tensor([[0, BOUND]]), r"2\*\*41"),
        (torch.tensor([[-BOUND, 0]]), r"2\*\*41"),
    ],
)
def test_inputs_are_validated(x: torch.Tensor, reason: str) -> None:
    krum: Callable[[], agg.AggregationRuleImpl] = lambda: agg.Krum(0)  # noqa: E731
    for make in [*ALL_RULES, krum]:
        with pytest.raises(ValueError, match=reason):
            make().aggregate(x)


def test_krum_needs_enough_inputs() -> None:
    x = torch.zeros(6, 3, dtype=torch.int64)
    agg.Krum(1).aggregate(x[:5])
    with pytest.raises(ValueError, match=r"n >= 2f \+ 3 = 7"):
        agg.Krum(2).aggregate(x)
    with pytest.raises(ValueError, match=r"n >= 2f \+ 3 = 7"):
        agg.MultiKrum(2).aggregate(x)


def test_make_rule() -> None:
    assert isinstance(agg.make_rule(AggregationRule.MEAN, 0), agg.Mean)
    assert agg.make_rule(AggregationRule.TRIMMED_MEAN, 1000).beta_bps == 1000  # type: ignore[attr-defined]
    assert isinstance(agg.make_rule(AggregationRule.COORDINATE_MEDIAN, 0), agg.CoordinateMedian)
    assert type(agg.make_rule(AggregationRule.KRUM, 2)) is agg.Krum
    assert type(agg.make_rule(AggregationRule.MULTI_KRUM, 2)) is agg.MultiKrum
    assert agg.make_rule(AggregationRule.CENTERED_CLIP, 500_000).radius_ppm == 500_000  # type: ignore[attr-defined]
    assert agg.make_rule(3, 1).rule == AggregationRule.KRUM  # type: ignore[arg-type]
    for rule, param, reason in [
        (AggregationRule.MEAN, 1, "takes no parameter"),
        (AggregationRule.COORDINATE_MEDIAN, 5, "takes no parameter"),
        (AggregationRule.TRIMMED_MEAN, 5000, "beta_bps"),
        (AggregationRule.KRUM, -1, "f >= 0"),
        (AggregationRule.CENTERED_CLIP, 0, "radius_ppm"),
        (AggregationRule.CENTERED_CLIP, 2**32, "radius_ppm"),
    ]:
        with pytest.raises(ValueError, match=reason):
            agg.make_rule(rule, param)
