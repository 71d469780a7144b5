"""Distance between two inner-loop checkpoints and the honest-divergence envelope (training-fraud referees).

A referee that does not share the trainer's device class (or deterministic mode) cannot reproduce
its checkpoint bit for bit: bf16 autocast rounds activations and gradients to 8 mantissa bits, a
GPU sums in another order. It re-executes the segment on its own device from the trainer's
checkpoint ``c_s`` (the *start*, identical for both) and measures how far the trainer's claimed
``c_{s+1}`` lies from its own replay, per tensor of the canonical layout:

* ``weight_rel_l2`` -- ``||claimed_t - replayed_t||_2 / ||replayed_t - start_t||_2``: the distance
  in units of the segment's own update of that tensor (so it is independent of the weights' scale
  and of the learning rate). Skipping a tenth of the steps, training on other data or with another
  learning rate moves it by a large fraction of the update; honest rounding moves it little.
  A tensor of one dimension (a bias, a norm's gain or shift) is measured in units of at least
  ``vector_floor * lr * sqrt(n * numel_t)`` (:func:`update_floor`): some biases have no gradient
  at all (an attention key bias adds the same value to all of a query's logits, which the softmax
  cancels), so only rounding noise reaches them, and AdamW, which normalizes the gradient, turns
  that noise into steps of about ``lr`` that the two precisions do not share: ``0.4`` to
  ``0.8 * lr * sqrt(n)`` (RMS) per coordinate after ``n`` steps measured, where an fp32 replay
  barely moves them. In units of the
  tensor's own update that noise is a large, honest distance (0.43 for GPT-2's fused
  ``c_attn.bias``, whose key third is such a bias, against the bound 0.162 at ``n = 4``). The
  floor bounds what a forger can hide in a vector: an L2 change of ``tensor_bound(n) *
  vector_floor * lr * sqrt(n * numel_t)``, i.e. ``0.41 * lr * n`` per coordinate (RMS) at
  ``n = 4`` and ``0.28 * lr * n`` at ``n = 10`` with the defaults (AdamW moves a coordinate by at
  most about ``lr * n``). Matrices are measured against their update alone.
* ``weight_max_abs_lr`` -- ``max_i |claimed_i - replayed_i| / (lr * steps)``: the largest
  coordinate difference in units of the most an AdamW step can move a coordinate (about ``lr``),
  which catches a change concentrated on a few coordinates that the L2 ratio dilutes.
* ``exp_avg_rel_l2`` / ``exp_avg_sq_rel_l2`` -- ``||claimed_t - replayed_t||_2 / ||replayed_t||_2``
  for the AdamW moments. The moments are compared too, because the next segment is replayed
  *from* the trainer's claimed moments: unchecked, they would let a cheater steer the following
  steps at will (a forged first moment is a free update direction for ~1/(1-beta1) steps).

The whole-vector weight ratio of a segment that holds AdamW's first step (some tensor's step count
is 0 at the start and not at the replay's end: a new optimizer, the round's first segment in round
0 or after a trainer's restart) is bounded by at least ``weight_floor / sqrt(n)``: that first step
is ``lr * sign(g)``, bf16 flips the sign of near-zero gradients, and the ratio measured 0.06 to
0.09 at ``n = 1`` and 0.05 to 0.06 at ``n = 2`` (1/sqrt(n) decay) against ``weight_base +
weight_per_step * n`` = 0.051 / 0.052; from an AdamW that stepped, at most 0.03 at ``n = 1, 2``.

Everything is vectorized over coordinates (``index_add_`` / ``scatter_reduce_`` by tensor id).
The envelope (:class:`~syncline.protocol.spec.ToleranceModel`) grows linearly with the segment's
length ``n``: ``bound(n) = base + per_step * n``, for the weights and the moments; the max-abs
bound is a constant multiple of ``lr * n``. The integer and exact parts of a checkpoint (step,
layout, AdamW step counts, optimizer coefficients, generator state) are compared exactly
(:func:`exact_fields_differ`). :func:`judge` turns a distance into a :class:`ToleranceVerdict`.

Pure: no I/O, no chain. ``scripts/bench/referee_tolerance.py`` measures honest and cheating
distances and is what the default envelope was calibrated with (``docs/benchmarks.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from syncline.protocol.checkpoints import Checkpoint, CheckpointError
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import ToleranceModel

_TINY = 1e-30  # a denominator floor: 0 / floor is 0, any difference over an untouched tensor is huge


@dataclass(frozen=True)
class SegmentDistance:
    """How far a claimed checkpoint lies from a replay of the same segment (see the module docstring).

    ``weight_rel_l2`` and the moments' fields are ratios over the whole vector;
    ``weight_rel_l2_tensor`` is the largest per-tensor weight ratio, of ``worst_tensor``.
    """

    steps: int
    weight_rel_l2: float
    weight_rel_l2_tensor: float
    weight_max_abs_lr: float
    exp_avg_rel_l2: float
    exp_avg_sq_rel_l2: float
    worst_tensor: str
    #: whether the segment holds some tensor's first AdamW step (its count is 0 at the start and
    #: not at the replay's end): the whole-vector bound then has its floor (:func:`judge`)
    first_step: bool = False

    MEASURES = ("weight_rel_l2", "weight_rel_l2_tensor", "weight_max_abs_lr", "exp_avg_rel_l2", "exp_avg_sq_rel_l2")
    """The measured distances (the fields the envelope bounds)."""

    def to_mapping(self) -> dict[str, float | int | str]:
        return {
            "steps": self.steps,
            **{k: getattr(self, k) for k in self.MEASURES},
            "worst_tensor": self.worst_tensor,
            "first_step": self.first_step,
        }


@dataclass(frozen=True)
class ToleranceVerdict:
    """``within`` is False when some measure exceeds its bound; ``reason`` names the first one."""

    within: bool
    reason: str
    distance: SegmentDistance


def tensor_ids(layout: ParameterLayout) -> torch.Tensor:
    """For every coordinate of the flat vector, the index of its layout entry (int64)."""
    counts = torch.tensor([e.numel for e in layout.entries], dtype=torch.int64)
    return torch.repeat_interleave(torch.arange(len(layout.entries), dtype=torch.int64), counts)


def _per_tensor_sq(values: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Sum of squares of ``values`` per tensor (float64 accumulation)."""
    return torch.zeros(n, dtype=torch.float64).index_add_(0, ids, values.double().square())


_DEFAULT_VECTOR_FLOOR = ToleranceModel().vector_floor


def update_floor(layout: ParameterLayout, *, lr: float, steps: int, vector_floor: float) -> torch.Tensor:
    """Per layout entry, the least L2 norm a tensor's update is measured against (float64):
    ``vector_floor * lr * sqrt(steps * numel)`` for a tensor of at most one dimension, 0 for the others."""
    return torch.tensor(
        [vector_floor * lr * math.sqrt(steps * e.numel) if len(e.shape) <= 1 else 0.0 for e in layout.entries],
        dtype=torch.float64,
    )


def per_tensor_rel_l2(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor, layout: ParameterLayout) -> torch.Tensor:
    """``||a_t - b_t|| / ||scale_t||`` for every tensor ``t`` of ``layout`` (float64, one value per entry)."""
    ids = tensor_ids(layout)
    n = len(layout.entries)
    num = _per_tensor_sq(a - b, ids, n).sqrt()
    den = _per_tensor_sq(scale, ids, n).sqrt().clamp_min(_TINY)
    return num / den


def _check_vectors(*vectors: torch.Tensor, numel: int) -> None:
    for v in vectors:
        if v.dim() != 1 or v.numel() != numel:
            raise CheckpointError(f"tolerance: expected vectors of {numel} values, got shape {tuple(v.shape)}")


def segment_distance(
    start: Checkpoint,
    claimed: Checkpoint,
    replayed: Checkpoint,
    layout: ParameterLayout,
    *,
    steps: int,
    vector_floor: float = _DEFAULT_VECTOR_FLOOR,
) -> SegmentDistance:
    """The distance of ``claimed`` (the trainer's ``c_{s+1}``) from ``replayed`` (the referee's
    replay of the ``steps`` steps from ``start`` = ``c_s``); one-dimensional tensors' updates are
    measured against at least :func:`update_floor`. Raises CheckpointError on shapes that do not
    fit ``layout`` or a non-positive ``steps``."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise CheckpointError(f"tolerance: a segment has at least one step, got {steps!r}")
    numel = layout.numel
    for ckpt in (start, claimed, replayed):
        _check_vectors(ckpt.params, ckpt.exp_avg, ckpt.exp_avg_sq, numel=numel)
    ids = tensor_ids(layout)
    n = len(layout.entries)
    diff_sq = _per_tensor_sq(claimed.params - replayed.params, ids, n)
    update_sq = _per_tensor_sq(replayed.params - start.params, ids, n)
    lr = start.optimizer.lr
    floor = update_floor(layout, lr=lr, steps=steps, vector_floor=vector_floor)
    rel = diff_sq.sqrt() / torch.maximum(update_sq.sqrt(), floor).clamp_min(_TINY)
    worst = int(torch.argmax(rel))
    max_abs = float((claimed.params - replayed.params).abs().max()) / (lr * steps)
    first_step = any(
        s == 0 and r > 0 for s, r in zip(start.adam_steps, replayed.adam_steps, strict=False)
    )  # (a length mismatch is the exact comparison's to report)
    return SegmentDistance(
        steps=steps,
        weight_rel_l2=_ratio(float(diff_sq.sum()), float(update_sq.sum())),
        weight_rel_l2_tensor=float(rel[worst]),
        weight_max_abs_lr=max_abs,
        exp_avg_rel_l2=global_rel_l2(claimed.exp_avg, replayed.exp_avg, replayed.exp_avg),
        exp_avg_sq_rel_l2=global_rel_l2(claimed.exp_avg_sq, replayed.exp_avg_sq, replayed.exp_avg_sq),
        worst_tensor=layout.entries[worst].name,
        first_step=first_step,
    )


def _ratio(num_sq: float, den_sq: float) -> float:
    return math.sqrt(num_sq) / max(math.sqrt(den_sq), _TINY)


def global_rel_l2(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    """``||a - b|| / ||scale||`` over whole vectors (float64 accumulation)."""
    return _ratio(float((a.double() - b.double()).square().sum()), float(scale.double().square().sum()))


def exact_fields_differ(claimed: Checkpoint, replayed: Checkpoint) -> str | None:
    """What a tolerant comparison still requires to be identical: None when it is, else a one-line
    reason. The device class fields (``device``, ``dtype``, ``deterministic``, ``threads``) are the
    trainer's own declaration and are not compared."""
    if claimed.step != replayed.step:
        return f"step {claimed.step} != {replayed.step}"
    if claimed.layout_digest != replayed.layout_digest:
        return "layout digest differs"
    if claimed.adam_steps != replayed.adam_steps:
        return "AdamW step counts differ"
    if claimed.optimizer != replayed.optimizer:
        return "optimizer coefficients differ"
    if claimed.rng_state != replayed.rng_state:
        return "generator state differs"
    return None


def judge(distance: SegmentDistance, model: ToleranceModel) -> ToleranceVerdict:
    """Whether ``distance`` lies within ``model``'s honest-divergence envelope for its segment length."""
    n = distance.steps
    weight_bound = model.weight_bound(n, first_step=distance.first_step)
    checks = (
        ("weight relative L2", distance.weight_rel_l2, weight_bound),
        (f"weight relative L2 of {distance.worst_tensor}", distance.weight_rel_l2_tensor, model.tensor_bound(n)),
        ("weight max-abs / (lr * steps)", distance.weight_max_abs_lr, model.max_abs_lr),
        ("exp_avg relative L2", distance.exp_avg_rel_l2, model.moment_bound(n)),
        ("exp_avg_sq relative L2", distance.exp_avg_sq_rel_l2, model.moment_bound(n)),
    )
    for name, value, bound in checks:
        if not value <= bound:  # NaN is outside
            return ToleranceVerdict(
                False, f"{name} {value:.4g} exceeds the envelope {bound:.4g} for {n} steps", distance
            )
    return ToleranceVerdict(
        True,
        f"within the envelope for {n} steps (weight relative L2 {distance.weight_rel_l2:.3g} <= {weight_bound:.3g})",
        distance,
    )


def compare(
    start: Checkpoint, claimed: Checkpoint, replayed: Checkpoint, layout: ParameterLayout, model: ToleranceModel
) -> ToleranceVerdict:
    """:func:`exact_fields_differ`, then :func:`segment_distance` against the envelope."""
    steps = replayed.step - start.step
    distance = segment_distance(start, claimed, replayed, layout, steps=steps, vector_floor=model.vector_floor)
    differ = exact_fields_differ(claimed, replayed)
    if differ is not None:
        return ToleranceVerdict(False, differ, distance)
    return judge(distance, model)
