"""Fixed-point Nesterov outer step: exact spec formula, float references, bounds and saturation.

Rounding bound for one step against the exact rational computation with the same Q16
coefficients (one grid unit = 2**-32): the momentum floor loses < 1 unit; the inner momentum
term loses < M/2**16 + 1 < 2 units, scaled by L/2**16, plus < 1 unit for the final floor. So
``|m - m_exact| < 1`` and ``|theta - theta_exact| < 2 L / 2**16 + 1``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from syncline.protocol.fixed_point import q16
from syncline.protocol.outer_optimizer import STATE_MAX, coefficients, nesterov_step

STATE = 1 << 46
DELTA = 1 << 41
LIMIT = STATE - 1  # the saturation bound, written out independently of the module


def sat(x: int) -> int:
    return max(-LIMIT, min(LIMIT, x))


def spec_step(
    theta: list[int], m: list[int], delta: list[int], lr_ppm: int, mom_ppm: int
) -> tuple[list[int], list[int]]:
    """The documented formula with Python big ints (no overflow possible): the new momentum is
    saturated first and feeds the look-ahead saturated, then the new weights are saturated."""
    big_l, big_m = q16(lr_ppm), q16(mom_ppm)
    m_new = [sat(((big_m * a) >> 16) + d) for a, d in zip(m, delta, strict=True)]
    step = [(big_l * (d + ((big_m * b) >> 16))) >> 16 for d, b in zip(delta, m_new, strict=True)]
    return [sat(t - s) for t, s in zip(theta, step, strict=True)], m_new


def unsaturated_step(
    theta: list[int], m: list[int], delta: list[int], lr_ppm: int, mom_ppm: int
) -> tuple[list[int], list[int]]:
    """The formula before the bound rule existed (no clamps)."""
    big_l, big_m = q16(lr_ppm), q16(mom_ppm)
    m_new = [((big_m * a) >> 16) + d for a, d in zip(m, delta, strict=True)]
    step = [(big_l * (d + ((big_m * b) >> 16))) >> 16 for d, b in zip(delta, m_new, strict=True)]
    return [t - s for t, s in zip(theta, step, strict=True)], m_new


vec = st.integers(1, 30)


@st.composite
def step_inputs(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], int, int]:
    d = draw(vec)
    lr = draw(st.sampled_from([700_000, 1_000_000, 3_000_000, 1, 2**32 - 1]) | st.integers(1, 10_000_000))
    mom = draw(st.sampled_from([0, 900_000, 999_999]) | st.integers(0, 999_999))
    # Keep results inside the state bound: theta and m well inside, step bounded by L * 2**47.
    big_l = q16(lr)
    room = max(1, (STATE // 4) // max(1, (big_l >> 16) + 1) // 2)
    dlim = min(DELTA - 1, room)
    mlim = min(STATE // 4, room)
    theta = draw(st.lists(st.integers(-(STATE // 4), STATE // 4), min_size=d, max_size=d))
    m = draw(st.lists(st.integers(-mlim, mlim), min_size=d, max_size=d))
    delta = draw(st.lists(st.integers(-dlim, dlim), min_size=d, max_size=d))
    return theta, m, delta, lr, mom


def t64(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@given(step_inputs())
@settings(max_examples=150)
def test_matches_the_spec_formula_exactly(args: tuple[list[int], list[int], list[int], int, int]) -> None:
    theta, m, delta, lr, mom = args
    new_theta, new_m = nesterov_step(t64(theta), t64(m), t64(delta), lr, mom)
    exp_theta, exp_m = spec_step(theta, m, delta, lr, mom)
    assert new_m.tolist() == exp_m
    assert new_theta.tolist() == exp_theta


def _floor_inverse(target: int, big_m: int) -> int:
    """Smallest a with (big_m * a) >> 16 == target."""
    a = -((-target << 16) // big_m)
    assert (big_m * a) >> 16 == target
    return a


def test_int64_wraparound_cannot_hide_an_out_of_bound_step() -> None:
    """With L = 2**18 and v = 2**46 + 5, a naive int64 ``L * v`` wraps to ``2**18 * 5`` and the
    step would look tiny; the split product gives the true step 2**48 + 20 and the weight saturates."""
    lr, mom = 4_000_000, 999_999
    big_l, big_m = q16(lr), q16(mom)
    assert big_l == 1 << 18
    delta = DELTA - 1
    m_new = _floor_inverse((1 << 46) + 5 - delta, big_m)
    m = _floor_inverse(m_new - delta, big_m)
    assert abs(m) < STATE and abs(m_new) < STATE
    v = delta + ((big_m * m_new) >> 16)
    assert v == (1 << 46) + 5
    with np.errstate(over="ignore"):
        naive = int((np.int64(big_l) * np.int64(v)) >> np.int64(16))
    assert naive == 20  # what a wrapping implementation would subtract
    new_theta, new_m = nesterov_step(t64([0]), t64([m]), t64([delta]), lr, mom)
    assert new_theta.tolist() == [-LIMIT]  # 0 - (2**48 + 20), saturated; not -20
    assert new_m.tolist() == [m_new]
    # Near the bounds (|L * v| ~ 2**62.2) the same large-lr path is exact.
    theta, m_small, d_small = [-(STATE - 1)], [-(1 << 44)], [-(DELTA - 1)]
    new_theta, new_m = nesterov_step(t64(theta), t64(m_small), t64(d_small), lr, mom)
    assert (new_theta.tolist(), new_m.tolist()) == spec_step(theta, m_small, d_small, lr, mom)


@given(step_inputs())
@settings(max_examples=80)
def test_one_step_against_exact_rationals(args: tuple[list[int], list[int], list[int], int, int]) -> None:
    theta, m, delta, lr, mom = args
    lr_f, mom_f = Fraction(q16(lr), 2**16), Fraction(q16(mom), 2**16)
    new_theta, new_m = nesterov_step(t64(theta), t64(m), t64(delta), lr, mom)
    for i in range(len(theta)):
        m_exact = mom_f * m[i] + delta[i]
        theta_exact = theta[i] - lr_f * (delta[i] + mom_f * m_exact)
        assert abs(int(new_m[i]) - m_exact) < 1
        assert abs(int(new_theta[i]) - theta_exact) < 2 * lr_f + 1


def test_many_rounds_track_float64_dilocos_optimizer() -> None:
    """20 rounds vs a float64 Nesterov with the true lr=0.7, mu=0.9 (not the Q16 coefficients)."""
    rng = np.random.default_rng(0)
    d, rounds = 1000, 20
    theta0 = rng.normal(0, 0.05, d)
    theta = torch.from_numpy(np.rint(theta0 * 2**32).astype(np.int64))
    m = torch.zeros(d, dtype=torch.int64)
    tf, mf = theta0 * 2**32, np.zeros(d)
    for _ in range(rounds):
        delta = torch.from_numpy(np.rint(rng.normal(0, 1e-3, d) * 2**32).astype(np.int64))
        theta, m = nesterov_step(theta, m, delta, 700_000, 900_000)
        df = delta.numpy().astype(np.float64)
        mf = 0.9 * mf + df
        tf = tf - 0.7 * (df + 0.9 * mf)
    err = np.abs(theta.numpy() - tf)
    # Coefficient quantization: |0.7 - L/2**16| < 2**-16, |0.9 - M/2**16| < 2**-16, relative to
    # a total movement of at most ~rounds * 10 * |delta|; rounding adds < 3 units per round.
    movement = rounds * 10 * 4e-3 * 2**32
    assert err.max() <= 2 * 2**-16 * movement * 10 + 3 * rounds
    assert err.max() > 0  # the Q16 coefficients are not exactly 0.7 / 0.9


def test_descent_direction() -> None:
    theta = t64([10 << 32])
    delta = t64([1 << 32])  # theta_prev - theta_local = +1: the local model moved down
    new_theta, new_m = nesterov_step(theta, t64([0]), delta, 700_000, 900_000)
    assert int(new_theta) < int(theta) and int(new_m) == 1 << 32


def test_coefficients_and_validation() -> None:
    assert coefficients(700_000, 900_000) == (45875, 58982)
    z = t64([0, 0])
    for lr, mom, reason in [
        (0, 0, "outer lr"),
        (2**32, 0, "outer lr"),
        (True, 0, "outer lr"),
        (1, 1_000_000, "outer momentum"),
        (1, -1, "outer momentum"),
    ]:
        with pytest.raises(ValueError, match=reason):
            nesterov_step(z, z, z, lr, mom)
    with pytest.raises(ValueError, match="theta: values"):
        nesterov_step(t64([STATE, 0]), z, z, 1, 0)
    with pytest.raises(ValueError, match="momentum: values"):
        nesterov_step(z, t64([0, -STATE]), z, 1, 0)
    with pytest.raises(ValueError, match="delta: values"):
        nesterov_step(z, z, t64([DELTA, 0]), 1, 0)
    # Results outside the bound saturate (they raised before issue 10, finding 9).
    _, m_sat = nesterov_step(z, t64([STATE - 1, 0]), t64([DELTA - 1, 0]), 1, 999_999)
    assert m_sat.tolist() == [LIMIT, 0]
    w_sat, _ = nesterov_step(t64([-(STATE - 1), 0]), z, t64([DELTA - 1, 0]), 2_000_000, 0)
    assert w_sat.tolist() == [-LIMIT, 0]
    with pytest.raises(ValueError, match="shape"):
        nesterov_step(z, t64([0]), z, 1, 0)
    with pytest.raises(ValueError, match="int64"):
        nesterov_step(z.float(), z, z, 1, 0)


# ---------------------------------------------------------------- the state bound: saturation


@st.composite
def bound_inputs(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], int, int]:
    """Anything the step accepts, biased towards the bound: |theta|, |m| <= 2**46 - 1, |delta| < 2**41,
    every lr of the chain's uint32 and every momentum below one."""
    d = draw(vec)
    near = st.integers(0, 1 << 42).flatmap(lambda k: st.sampled_from([LIMIT - k, -(LIMIT - k)]))
    state = near | st.integers(-LIMIT, LIMIT) | st.sampled_from([LIMIT, -LIMIT, 0])
    delta = st.integers(-(DELTA - 1), DELTA - 1) | st.sampled_from([DELTA - 1, -(DELTA - 1), 127 << 34])
    lr = draw(st.sampled_from([700_000, 1_000_000, 2**32 - 1]) | st.integers(1, 2**32 - 1))
    mom = draw(st.sampled_from([0, 900_000, 999_999]) | st.integers(0, 999_999))
    return (
        draw(st.lists(state, min_size=d, max_size=d)),
        draw(st.lists(state, min_size=d, max_size=d)),
        draw(st.lists(delta, min_size=d, max_size=d)),
        lr,
        mom,
    )


@given(bound_inputs())
@settings(max_examples=200)
def test_saturates_exactly_like_the_reference(args: tuple[list[int], list[int], list[int], int, int]) -> None:
    """Every accepted input gives the big-int reference's saturated result, which stays in bounds."""
    theta, m, delta, lr, mom = args
    new_theta, new_m = nesterov_step(t64(theta), t64(m), t64(delta), lr, mom)
    exp_theta, exp_m = spec_step(theta, m, delta, lr, mom)
    assert new_m.tolist() == exp_m
    assert new_theta.tolist() == exp_theta
    assert max(map(abs, exp_theta + exp_m)) <= LIMIT == STATE_MAX


@given(bound_inputs())
@settings(max_examples=120)
def test_saturation_changes_nothing_inside_the_bound(args: tuple[list[int], list[int], list[int], int, int]) -> None:
    """Where the unsaturated formula stays within the bound, the result is that formula bit for bit
    (results away from the bound are those of the step before the rule existed)."""
    theta, m, delta, lr, mom = args
    new_theta, new_m = nesterov_step(t64(theta), t64(m), t64(delta), lr, mom)
    raw_theta, raw_m = unsaturated_step(theta, m, delta, lr, mom)
    for i in range(len(theta)):
        if abs(raw_m[i]) <= LIMIT:
            assert int(new_m[i]) == raw_m[i]
            if abs(raw_theta[i]) <= LIMIT:
                assert int(new_theta[i]) == raw_theta[i]
        else:
            assert int(new_m[i]) == (LIMIT if raw_m[i] > 0 else -LIMIT)
        if abs(raw_theta[i]) > LIMIT and abs(raw_m[i]) <= LIMIT:
            assert int(new_theta[i]) == (LIMIT if raw_theta[i] > 0 else -LIMIT)


@given(bound_inputs(), st.data())
@settings(max_examples=100)
def test_saturated_step_is_monotone_in_the_weights(
    args: tuple[list[int], list[int], list[int], int, int], data: st.DataObject
) -> None:
    """The step does not depend on theta and the clamp is monotone, so a larger weight never yields
    a smaller new weight (saturation cannot reorder coordinates)."""
    theta, m, delta, lr, mom = args
    bigger = [min(LIMIT, t + data.draw(st.integers(0, 1 << 44))) for t in theta]
    low, _ = nesterov_step(t64(theta), t64(m), t64(delta), lr, mom)
    high, _ = nesterov_step(t64(bigger), t64(m), t64(delta), lr, mom)
    assert bool((high >= low).all())


def test_momentum_saturates_before_it_feeds_the_look_ahead() -> None:
    """m = LIMIT, delta = 2**41 - 1, M ~ 1: the raw new momentum exceeds the bound; the look-ahead
    term uses the saturated momentum (the order is part of the rule)."""
    lr, mom = 1_000_000, 999_999
    big_m = q16(mom)
    m, delta = LIMIT, DELTA - 1
    raw_m = ((big_m * m) >> 16) + delta
    assert raw_m > LIMIT
    new_theta, new_m = nesterov_step(t64([0]), t64([m]), t64([delta]), lr, mom)
    assert new_m.tolist() == [LIMIT]
    step_saturated = (q16(lr) * (delta + ((big_m * LIMIT) >> 16))) >> 16
    step_raw = (q16(lr) * (delta + ((big_m * raw_m) >> 16))) >> 16
    assert step_saturated != step_raw
    assert new_theta.tolist() == [sat(-step_saturated)]
