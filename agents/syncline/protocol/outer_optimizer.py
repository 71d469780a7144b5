"""DiLoCo's outer optimizer (Nesterov momentum SGD) in exact fixed point, saturating at the state bound.

The chain stores ``outerLrPpm`` and ``outerMomentumPpm`` (DiLoCo defaults 0.7 and 0.9). Witnesses
derive Q16 coefficients ``L = q16(lr_ppm)`` and ``M = q16(mom_ppm)`` and, with the outer
gradient ``delta = theta_prev - theta_local`` (aggregated, Q32, so descent subtracts), compute
per coordinate::

    m_new     = sat(((M * m) >> 16) + delta)
    step      = (L * (delta + ((M * m_new) >> 16))) >> 16
    theta_new = sat(theta - step)

``>>`` is the arithmetic shift (floor) and ``sat(x) = min(max(x, -STATE_MAX), STATE_MAX)`` with
``STATE_MAX = 2**46 - 1``: every weight and momentum value satisfies ``|x| <= STATE_MAX``, i.e.
``|x| < 2**46``.

State bound rule (issue 10, finding 9)
--------------------------------------
A Byzantine trainer's maximal gradients under Mean drive the state towards the bound; there the
step saturates instead of failing, so every witness keeps computing the same next state and no
input has to be left out. Exactly:

1. Inputs must already be in bounds: ``|theta|, |m| <= STATE_MAX`` and ``|delta| < 2**41`` (the
   aggregation output bound); anything else raises ``ValueError`` (no honest state holds it).
2. Saturation is applied to the exact integer results *after* the floor shifts: first the new
   momentum is clamped, and the clamped value is both stored and used in the look-ahead term
   ``(M * m_new) >> 16``; then ``theta - step`` is clamped. Nothing else is clamped (``v`` and
   ``step`` are exact integers).
3. Away from the bound (when neither clamp changes a value) the result is the unsaturated formula,
   bit for bit the same as before the rule existed.

``ChunkAggregation.nesterovStep`` on chain applies the same rule in the same order.

Overflow: with ``|m|, |m_new| <= STATE_MAX``, ``|M * m| < 2**62`` and
``|v| = |delta + ((M * m_new) >> 16)| < 2**47``. Since ``L`` can reach ``2**28`` (``lr_ppm < 2**32``),
``L * v`` could overflow int64, so the step is computed as ``Lh * v + ((Ll * v) >> 16)`` with
``L = Lh * 2**16 + Ll``: ``floor(L * v / 2**16)`` equals that exactly because ``Lh * v * 2**16`` is
a multiple of ``2**16``, and ``|Ll * v| < 2**63``. Then ``|step| < 2**61`` and
``|theta - step| < 2**62``, so the clamps see exact values.

The arithmetic runs on zero-copy numpy views (its int64 kernels are faster than torch's here).
"""

from __future__ import annotations

import numpy as np
import torch

from syncline.protocol.fixed_point import PPM, Q16_BITS, as_numpy, check_abs_bound, check_int64, q16

STATE_BOUND_BITS = 46
STATE_MAX = (1 << STATE_BOUND_BITS) - 1  # the largest magnitude of a weight or a momentum value
DELTA_BOUND_BITS = 41
MAX_LR_PPM = (1 << 32) - 1  # the chain's uint32


def coefficients(lr_ppm: int, mom_ppm: int) -> tuple[int, int]:
    """``(L, M)`` in Q16 from the chain's ppm values; requires ``0 < lr_ppm < 2**32``, ``0 <= mom_ppm < 10**6``."""
    if isinstance(lr_ppm, bool) or not isinstance(lr_ppm, int) or not 0 < lr_ppm <= MAX_LR_PPM:
        raise ValueError(f"outer lr must be an int with 0 < lr_ppm < 2**32, got {lr_ppm!r}")
    if isinstance(mom_ppm, bool) or not isinstance(mom_ppm, int) or not 0 <= mom_ppm < PPM:
        raise ValueError(f"outer momentum must be an int with 0 <= mom_ppm < {PPM}, got {mom_ppm!r}")
    return q16(lr_ppm), q16(mom_ppm)


def saturate(a: np.ndarray) -> np.ndarray:
    """Clamp an int64 array to ``[-STATE_MAX, STATE_MAX]`` in place and return it."""
    np.clip(a, -STATE_MAX, STATE_MAX, out=a)
    return a


def nesterov_step(
    theta: torch.Tensor, momentum: torch.Tensor, delta: torch.Tensor, lr_ppm: int, mom_ppm: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One outer step; returns ``(theta_new, momentum_new)`` (int64, Q32, saturated at ``+-STATE_MAX``).

    Raises
    ------
    ValueError
        On dtype/shape mismatch, invalid coefficients or an input outside its bound
        (``|theta|, |momentum| < 2**46``, ``|delta| < 2**41``). Results never raise: they saturate.
    """
    lr_q, mom_q = coefficients(lr_ppm, mom_ppm)
    for name, t in (("theta", theta), ("momentum", momentum), ("delta", delta)):
        check_int64(t, name, ndim=1)
        if t.shape != theta.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, theta has {tuple(theta.shape)}")
    check_abs_bound(theta, 1 << STATE_BOUND_BITS, "theta")
    check_abs_bound(momentum, 1 << STATE_BOUND_BITS, "momentum")
    check_abs_bound(delta, 1 << DELTA_BOUND_BITS, "delta")
    th, mo = nesterov_arrays(as_numpy(theta), as_numpy(momentum), as_numpy(delta), lr_q, mom_q)
    return torch.from_numpy(th), torch.from_numpy(mo)


def nesterov_arrays(
    theta: np.ndarray, momentum: np.ndarray, delta: np.ndarray, lr_q: int, mom_q: int
) -> tuple[np.ndarray, np.ndarray]:
    """The step on int64 numpy arrays already checked against their bounds, with Q16 ``L``, ``M``
    (:func:`coefficients`); returns new arrays ``(theta_new, momentum_new)``."""
    m_new = saturate(((mom_q * momentum) >> Q16_BITS) + delta)
    v = delta + ((mom_q * m_new) >> Q16_BITS)
    lr_hi, lr_lo = lr_q >> Q16_BITS, lr_q & ((1 << Q16_BITS) - 1)
    step = lr_hi * v + ((lr_lo * v) >> Q16_BITS)
    return saturate(theta - step), m_new
