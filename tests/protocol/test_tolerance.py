"""Distance between a claimed and a replayed checkpoint, and the honest-divergence envelope (pure).

The vectorized per-tensor figures are checked against a plain per-tensor computation, the ratios
against constructions whose answer is known (a scaled update is ``|1 - f|`` away, a single
coordinate moved by ``k * lr * n`` has max-abs ``k``), and the verdict against the envelope's
bounds on both sides.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from syncline.errors import SpecError
from syncline.protocol.checkpoints import Checkpoint, CheckpointError, InnerHyperparameters
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import DEFAULT_VERIFICATION, ToleranceModel, VerificationPolicy
from syncline.protocol.tolerance import (
    SegmentDistance,
    compare,
    exact_fields_differ,
    judge,
    per_tensor_rel_l2,
    segment_distance,
    tensor_ids,
    update_floor,
)

HP = InnerHyperparameters(lr=1e-3, beta1=0.9, beta2=0.95, weight_decay=0.01, eps=1e-8, batch_size=8)
STEPS = 10
MODEL = ToleranceModel(
    weight_base=0.02, weight_per_step=0.001, tensor_factor=2.0, moment_base=0.1, moment_per_step=0.01, max_abs_lr=3.0
)


@pytest.fixture(scope="module")
def layout() -> ParameterLayout:
    return ParameterLayout.from_state_dict(
        {"c.norm": torch.zeros(4), "a.weight": torch.zeros(6, 5), "b.bias": torch.zeros(7)}
    )


def _ckpt(layout: ParameterLayout, step: int, seed: int, **changes: object) -> Checkpoint:
    gen = torch.Generator().manual_seed(seed)
    n = layout.numel
    ckpt = Checkpoint(
        step=step,
        layout_digest=layout.digest(),
        params=torch.randn(n, generator=gen),
        exp_avg=torch.randn(n, generator=gen) * 1e-3,
        exp_avg_sq=torch.rand(n, generator=gen) * 1e-6 + 1e-8,
        adam_steps=tuple(step + 5 for _ in layout.entries),
        optimizer=HP,
        rng_state=b"rng",
    )
    return dataclasses.replace(ckpt, **changes) if changes else ckpt  # type: ignore[arg-type]


@pytest.fixture()
def pair(layout: ParameterLayout) -> tuple[Checkpoint, Checkpoint]:
    """A start checkpoint and the referee's replay ``STEPS`` steps later (a random update of about
    ``lr`` per coordinate and step)."""
    start = _ckpt(layout, 10, 1)
    gen = torch.Generator().manual_seed(2)
    update = torch.randn(layout.numel, generator=gen) * HP.lr * STEPS
    replayed = _ckpt(layout, 10 + STEPS, 3, params=start.params + update)
    return start, replayed


def _claim(replayed: Checkpoint, **changes: object) -> Checkpoint:
    return dataclasses.replace(replayed, **changes)  # type: ignore[arg-type]


def test_tensor_ids_follow_the_layout(layout: ParameterLayout) -> None:
    ids = tensor_ids(layout)
    assert ids.shape == (layout.numel,)
    for index, e in enumerate(layout.entries):
        assert bool((ids[e.offset : e.offset + e.numel] == index).all()), e.name


def test_identical_checkpoints_are_at_distance_zero(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    d = segment_distance(start, replayed, replayed, layout, steps=STEPS)
    assert (d.weight_rel_l2, d.weight_rel_l2_tensor, d.weight_max_abs_lr) == (0.0, 0.0, 0.0)
    assert (d.exp_avg_rel_l2, d.exp_avg_sq_rel_l2) == (0.0, 0.0)
    assert judge(d, MODEL).within


@pytest.mark.parametrize("factor", [0.5, 0.9, 0.99, 1.01, 1.05, 2.0])
def test_a_scaled_update_is_its_scale_error_away(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint], factor: float
) -> None:
    start, replayed = pair
    scaled = start.params + factor * (replayed.params - start.params)
    d = segment_distance(start, _claim(replayed, params=scaled), replayed, layout, steps=STEPS)
    assert d.weight_rel_l2 == pytest.approx(abs(1 - factor), rel=1e-3)  # float32 weights
    assert d.weight_rel_l2_tensor == pytest.approx(abs(1 - factor), rel=1e-3)  # every tensor is scaled alike


def test_per_tensor_ratio_matches_a_plain_computation(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    gen = torch.Generator().manual_seed(9)
    claimed = replayed.params + torch.randn(layout.numel, generator=gen) * HP.lr
    update = replayed.params - start.params
    fast = per_tensor_rel_l2(claimed, replayed.params, update, layout)
    plain = [
        float((claimed[e.offset : e.offset + e.numel] - replayed.params[e.offset : e.offset + e.numel]).norm())
        / float(update[e.offset : e.offset + e.numel].norm())
        for e in layout.entries
    ]
    assert fast.tolist() == pytest.approx(plain, rel=1e-5)
    d = segment_distance(start, _claim(replayed, params=claimed), replayed, layout, steps=STEPS)
    assert d.weight_rel_l2_tensor == pytest.approx(max(plain), rel=1e-5)
    assert d.worst_tensor == layout.entries[plain.index(max(plain))].name
    assert d.weight_rel_l2 == pytest.approx(float((claimed - replayed.params).norm() / update.norm()), rel=1e-5)


def test_one_tensor_changed_shows_in_the_per_tensor_ratio(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    matrix = next(e for e in layout.entries if e.name == "a.weight")
    claimed = replayed.params.clone()
    span = slice(matrix.offset, matrix.offset + matrix.numel)
    claimed[span] = start.params[span]  # that tensor was not trained at all
    d = segment_distance(start, _claim(replayed, params=claimed), replayed, layout, steps=STEPS)
    assert d.worst_tensor == "a.weight" and d.weight_rel_l2_tensor == pytest.approx(1.0, rel=1e-5)
    assert d.weight_rel_l2 < d.weight_rel_l2_tensor  # diluted over the whole vector
    assert not judge(d, MODEL).within


def test_update_floor_covers_vectors_only(layout: ParameterLayout) -> None:
    floor = update_floor(layout, lr=HP.lr, steps=STEPS, vector_floor=2.5)
    expected = {
        "a.weight": 0.0,
        "b.bias": 2.5 * HP.lr * math.sqrt(STEPS * 7),
        "c.norm": 2.5 * HP.lr * math.sqrt(STEPS * 4),
    }
    assert floor.tolist() == pytest.approx([expected[e.name] for e in layout.entries], rel=1e-12)


@pytest.mark.parametrize("floor", [0.0, 1.0, 4.0])
def test_a_vector_is_measured_against_at_least_the_floor(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint], floor: float
) -> None:
    """A vector whose own update is small (here: none) is measured in units of the floor
    ``floor * lr * sqrt(n * numel)``; a matrix keeps its update as the unit."""
    start, replayed = pair
    bias = next(e for e in layout.entries if e.name == "b.bias")
    span = slice(bias.offset, bias.offset + bias.numel)
    still = replayed.params.clone()
    still[span] = start.params[span]  # the replay did not move the bias
    replayed = _claim(replayed, params=still)
    noise = torch.full((bias.numel,), 0.5 * HP.lr * math.sqrt(STEPS))  # what bf16 noise does to it
    claimed = still.clone()
    claimed[span] += noise
    d = segment_distance(start, _claim(replayed, params=claimed), replayed, layout, steps=STEPS, vector_floor=floor)
    assert d.worst_tensor == "b.bias"
    unit = floor * HP.lr * math.sqrt(STEPS * bias.numel)
    if floor:
        assert d.weight_rel_l2_tensor == pytest.approx(float(noise.norm()) / unit, rel=1e-5)
    else:  # against its own update alone, which is 0: any difference is outside
        assert d.weight_rel_l2_tensor > 1e20
    model = dataclasses.replace(DEFAULT_VERIFICATION.tolerance, vector_floor=floor)
    assert (d.weight_rel_l2_tensor <= model.tensor_bound(STEPS)) == (floor == 4.0)
    # compare() measures with the model's floor
    via = compare(start, _claim(replayed, params=claimed), replayed, layout, model).distance
    assert via.weight_rel_l2_tensor == d.weight_rel_l2_tensor


@pytest.mark.parametrize("k", [0.5, 2.9, 3.1, 50.0])
def test_max_abs_is_in_units_of_lr_per_step(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint], k: float
) -> None:
    start, replayed = pair
    claimed = replayed.params.clone()
    claimed[3] += k * HP.lr * STEPS
    d = segment_distance(start, _claim(replayed, params=claimed), replayed, layout, steps=STEPS)
    assert d.weight_max_abs_lr == pytest.approx(k, rel=1e-4)
    verdict = judge(dataclasses.replace(d, weight_rel_l2=0.0, weight_rel_l2_tensor=0.0), MODEL)
    assert verdict.within == (k <= MODEL.max_abs_lr)
    if not verdict.within:
        assert verdict.reason.startswith("weight max-abs / (lr * steps)")


def test_moments_are_compared_relative_to_their_own_norm(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    d = segment_distance(
        start,
        _claim(replayed, exp_avg=replayed.exp_avg * 1.3, exp_avg_sq=replayed.exp_avg_sq * 0.9),
        replayed,
        layout,
        steps=STEPS,
    )
    assert d.exp_avg_rel_l2 == pytest.approx(0.3, rel=1e-4)
    assert d.exp_avg_sq_rel_l2 == pytest.approx(0.1, rel=1e-4)
    assert d.weight_rel_l2 == 0.0
    verdict = judge(d, MODEL)
    assert not verdict.within and verdict.reason.startswith("exp_avg relative L2 0.3")
    # a forged first moment is a free update direction for the next segment: it must not pass
    forged = judge(dataclasses.replace(d, exp_avg_rel_l2=MODEL.moment_bound(STEPS) * 1.01), MODEL)
    assert not forged.within


def test_a_difference_on_a_tensor_the_replay_did_not_move_is_outside(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, _ = pair
    frozen = _ckpt(layout, start.step + STEPS, 3, params=start.params.clone())  # nothing moved
    d0 = segment_distance(start, frozen, frozen, layout, steps=STEPS)
    assert d0.weight_rel_l2 == 0.0 and judge(d0, MODEL).within
    moved = frozen.params.clone()
    moved[0] += 1e-6
    d = segment_distance(start, _claim(frozen, params=moved), frozen, layout, steps=STEPS)
    assert d.weight_rel_l2 > 1e20 and not judge(d, MODEL).within


def _distance(steps: int, weight: float) -> SegmentDistance:
    return SegmentDistance(steps, weight, weight, 0.0, 0.0, 0.0, "a.weight")


@pytest.mark.parametrize("steps", [1, 4, 10, 30, 500])
def test_the_envelope_grows_with_segment_length_and_bounds_both_ways(steps: int) -> None:
    bound = MODEL.weight_bound(steps)
    linear = MODEL.weight_base + MODEL.weight_per_step * steps
    assert bound == pytest.approx(linear)
    first = MODEL.weight_bound(steps, first_step=True)  # a segment holding AdamW's first step
    assert first == pytest.approx(max(linear, MODEL.weight_floor / math.sqrt(steps)))
    assert MODEL.weight_bound(steps + 1) > bound
    assert MODEL.moment_bound(steps + 1) > MODEL.moment_bound(steps)
    assert MODEL.tensor_bound(steps) == pytest.approx(MODEL.tensor_factor * linear)  # the floor is the vector's only
    assert judge(_distance(steps, bound * 0.999), MODEL).within
    outside = judge(_distance(steps, bound * 1.001), MODEL)
    tensor = min(first, MODEL.tensor_bound(steps)) * 0.999  # a single tensor as far as it may be
    fresh = dataclasses.replace(_distance(steps, first * 0.999), weight_rel_l2_tensor=tensor, first_step=True)
    assert judge(fresh, MODEL).within
    assert not judge(dataclasses.replace(fresh, weight_rel_l2=first * 1.001), MODEL).within
    assert not outside.within and f"for {steps} steps" in outside.reason and "\n" not in outside.reason


def test_nan_is_never_within() -> None:
    assert not judge(_distance(10, math.nan), MODEL).within
    assert not judge(dataclasses.replace(_distance(10, 0.0), exp_avg_sq_rel_l2=math.nan), MODEL).within


def test_the_default_envelope_is_positive_and_grows() -> None:
    tol = DEFAULT_VERIFICATION.tolerance
    assert 0 < tol.weight_bound(1) < tol.weight_bound(10) < tol.weight_bound(100)
    # a segment holding a new AdamW's first step (~lr * sign(g)) gets the floor, shrinking as 1/sqrt(n)
    first = [tol.weight_bound(n, first_step=True) for n in (1, 2, 4, 10)]
    assert first[0] == tol.weight_floor > first[1] > first[2] > tol.weight_bound(4) and first[3] == tol.weight_bound(10)
    assert 0 < tol.moment_bound(1) < tol.moment_bound(10)
    assert tol.tensor_factor >= 1 and tol.max_abs_lr > 0


def test_exact_fields_are_compared_exactly_and_the_device_declaration_is_not(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    same = _claim(replayed, dtype="bf16", threads=7, device="cuda", deterministic=False)
    assert exact_fields_differ(same, replayed) is None
    assert compare(start, same, replayed, layout, MODEL).within
    changes: dict[str, dict[str, object]] = {
        "step": {"step": replayed.step + 1},
        "AdamW step counts": {"adam_steps": tuple(s + 1 for s in replayed.adam_steps)},
        "optimizer": {"optimizer": dataclasses.replace(HP, lr=2e-3)},
        "generator": {"rng_state": b"other"},
    }
    for word, change in changes.items():
        reason = exact_fields_differ(_claim(replayed, **change), replayed)
        assert reason is not None and word in reason, (word, reason)
        verdict = compare(start, _claim(replayed, **change), replayed, layout, MODEL)
        assert not verdict.within and verdict.reason == reason


def test_compare_takes_the_segment_length_from_the_checkpoints(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    verdict = compare(start, replayed, replayed, layout, MODEL)
    assert verdict.distance.steps == STEPS


def test_bad_inputs_are_one_line_checkpoint_errors(
    layout: ParameterLayout, pair: tuple[Checkpoint, Checkpoint]
) -> None:
    start, replayed = pair
    with pytest.raises(CheckpointError, match="at least one step"):
        segment_distance(start, replayed, replayed, layout, steps=0)
    other = ParameterLayout.from_state_dict({"x": torch.zeros(3)})
    with pytest.raises(CheckpointError, match=r"^tolerance: expected vectors of 3 values"):
        segment_distance(start, replayed, replayed, other, steps=STEPS)


def test_the_vector_floor_is_in_the_canonical_json_only_when_not_the_default() -> None:
    """Policies written before the floor keep their hash (and get the default floor); another
    floor is written, read back, and checked like every bound."""
    default = VerificationPolicy()
    assert "vector_floor" not in default.to_mapping()["tolerance"]
    assert VerificationPolicy.from_mapping(default.to_mapping()) == default
    assert VerificationPolicy.from_mapping({"tolerance": {}}).tolerance.vector_floor == 5.0
    other = VerificationPolicy(tolerance=ToleranceModel(vector_floor=2.5))
    assert other.to_mapping()["tolerance"]["vector_floor"] == 2.5
    assert VerificationPolicy.from_mapping(other.to_mapping()) == other
    with pytest.raises(SpecError, match=r"^verification\.tolerance\.vector_floor must be a finite number >= 0"):
        VerificationPolicy.from_mapping({"tolerance": {"vector_floor": -1}})


def test_the_weight_floor_is_in_the_canonical_json_only_when_not_the_default() -> None:
    """Policies written before the whole-vector floor keep their hash and get the default floor."""
    default = VerificationPolicy()
    assert "weight_floor" not in default.to_mapping()["tolerance"]
    assert VerificationPolicy.from_mapping({"tolerance": {}}).tolerance.weight_floor == 0.14
    old = VerificationPolicy(tolerance=ToleranceModel(weight_floor=0.0))  # the rule before the floor
    assert old.to_mapping()["tolerance"]["weight_floor"] == 0.0
    assert VerificationPolicy.from_mapping(old.to_mapping()) == old
    assert old.tolerance.weight_bound(1, first_step=True) == pytest.approx(0.051)
    with pytest.raises(SpecError, match=r"^verification\.tolerance\.weight_floor must be a finite number >= 0"):
        VerificationPolicy.from_mapping({"tolerance": {"weight_floor": math.inf}})


def _doc_within(
    start: Checkpoint, claimed: Checkpoint, replayed: Checkpoint, layout: ParameterLayout, t: ToleranceModel
) -> bool:
    """docs/protocol.md §13.6, written from the page in plain float64 loops (no vectorization)."""
    n, lr = replayed.step - start.step, start.optimizer.lr
    s, c, r = (x.params.double().tolist() for x in (start, claimed, replayed))

    def norm(values: list[float]) -> float:
        return math.sqrt(sum(v * v for v in values))

    def ratio(num: float, den: float) -> float:
        return num / max(den, 1e-30)

    weight_bound = t.weight_base + t.weight_per_step * n
    first_step = any(a == 0 and b > 0 for a, b in zip(start.adam_steps, replayed.adam_steps, strict=True))
    whole_bound = max(weight_bound, t.weight_floor / math.sqrt(n)) if first_step else weight_bound
    if (
        not ratio(norm([a - b for a, b in zip(c, r, strict=True)]), norm([a - b for a, b in zip(r, s, strict=True)]))
        <= whole_bound
    ):
        return False
    for e in layout.entries:
        span = range(e.offset, e.offset + e.numel)
        floor = t.vector_floor * lr * math.sqrt(n * e.numel) if len(e.shape) <= 1 else 0.0
        den = max(norm([r[i] - s[i] for i in span]), floor)
        if not ratio(norm([c[i] - r[i] for i in span]), den) <= t.tensor_factor * weight_bound:
            return False
    if not max(abs(a - b) for a, b in zip(c, r, strict=True)) / (lr * n) <= t.max_abs_lr:
        return False
    for m in ("exp_avg", "exp_avg_sq"):
        cm, rm = getattr(claimed, m).double().tolist(), getattr(replayed, m).double().tolist()
        if (
            not ratio(norm([a - b for a, b in zip(cm, rm, strict=True)]), norm(rm))
            <= t.moment_base + t.moment_per_step * n
        ):
            return False
    return True


@pytest.mark.parametrize("seed", range(40))
def test_the_verdict_is_the_one_docs_protocol_13_6_defines(layout: ParameterLayout, seed: int) -> None:
    """Random claims around a replay whose vectors barely move (where the floor decides), judged
    by ``compare`` and by an independent reading of the page: the same verdict every time."""
    gen = torch.Generator().manual_seed(100 + seed)
    start = _ckpt(layout, 10, seed)
    if seed % 2:  # a new optimizer: the segment holds AdamW's first step (the whole-vector floor)
        start = dataclasses.replace(start, adam_steps=(0,) * len(layout.entries))
    update = torch.randn(layout.numel, generator=gen) * HP.lr * STEPS
    for e in layout.entries:
        if len(e.shape) <= 1:
            update[e.offset : e.offset + e.numel] *= 0.01 * (seed % 5)  # a vector the replay hardly moves
    replayed = _ckpt(layout, 10 + STEPS, 3, params=start.params + update)
    scale = 10 ** (-1.5 - 2 * torch.rand((), generator=gen).item())
    noise = torch.randn(layout.numel, generator=gen) * HP.lr * STEPS * scale
    for e in layout.entries:
        if len(e.shape) <= 1:  # up to about 0.15 lr per step on the vectors
            noise[e.offset : e.offset + e.numel] *= 0.15 * torch.rand((), generator=gen).item() / scale
    claimed = _claim(replayed, params=replayed.params + noise, exp_avg=replayed.exp_avg * (1 + 0.03 * (seed % 3)))
    tolerance = dataclasses.replace(
        DEFAULT_VERIFICATION.tolerance,
        vector_floor=float(seed % 4 + 1),
        weight_floor=(0.0, 0.01, 0.14, 0.5)[seed // 2 % 4],
    )
    assert compare(start, claimed, replayed, layout, tolerance).within == _doc_within(
        start, claimed, replayed, layout, tolerance
    )
