"""The vision adapter: image shards (encode, decode, hostile bytes), the pixel scaling of
docs/protocol.md §12.6, batches, loss and top-1 accuracy, the export, and replay determinism of the
inner loop on a ViT (what a referee re-executes)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from syncline.errors import SpecError
from syncline.modality.lora import trained_parameters
from syncline.modality.vision import (
    EXPORT_PROCESSOR_FILE,
    EXPORT_VISION_FILE,
    ImageShardError,
    VisionAdapter,
    adapter_from_spec,
    decode_image_shard,
    encode_image_shard,
    pixel_table,
    write_export_files,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.trainer.inner_loop import InnerLoop

TINY_VIT = {
    "family": "vit",
    "patch_size": 2,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}
MEAN, STD = [0.3], [0.4]


def adapter(**kw: Any) -> VisionAdapter:
    args: dict[str, Any] = {
        "image_size": 8,
        "num_channels": 1,
        "num_labels": 10,
        "pixel_mean": MEAN,
        "pixel_std": STD,
    }
    return VisionAdapter(**{**args, **kw})


def random_images(n: int, *, c: int = 1, size: int = 8, classes: int = 10, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, c, size, size), dtype=np.uint8), rng.integers(0, classes, n)


def spec_for(meta: dict[str, Any], model: dict[str, Any] | None = None) -> TrainingTaskSpec:
    family, config = "vit", {k: v for k, v in (model or TINY_VIT).items() if k != "family"}
    return TrainingTaskSpec.from_mapping(
        {
            "name": "vision-test",
            "modality": "vision",
            "model": {"family": (model or TINY_VIT).get("family", family), "config": config},
            "dataset": {"shard_hashes": ["0x" + "11" * 32]},
            "inner_steps": 4,
            "rounds": 1,
            "round_duration_s": 60,
            "trainer_stake_wei": 1,
            "min_trainers": 1,
            "max_trainers": 1,
            "enrollment_deadline": 1,
            "witnesses": ["0x" + "22" * 20],
            "threshold": 1,
            "reward_pool_wei": 1,
            "initial_state_root": "0x" + "33" * 32,
            "metadata": meta,
        }
    )


META = {"image_size": 8, "num_channels": 1, "num_labels": 10, "pixel_mean": MEAN, "pixel_std": STD}

# ---------------------------------------------------------------------- shards


def test_image_shard_round_trips_in_the_documented_layout() -> None:
    images, labels = random_images(5, c=3, size=4)
    data = encode_image_shard(images, labels)
    assert len(data) == 20 + 5 * (3 * 4 * 4 + 2)
    assert data[:20] == b"SYNCIMG1" + struct.pack("<IHHHH", 5, 3, 4, 4, 0)
    assert data[20 : 20 + images.size] == images.tobytes()  # [N, C, H, W] row-major
    assert data[20 + images.size :] == b"".join(struct.pack("<H", int(v)) for v in labels)
    decoded = decode_image_shard(data)
    assert decoded.images.dtype == torch.uint8 and decoded.labels.dtype == torch.int64
    assert np.array_equal(decoded.images.numpy(), images)
    assert decoded.labels.tolist() == labels.tolist()


def _shard(n: int = 3, c: int = 1, h: int = 8, w: int = 8, reserved: int = 0, magic: bytes = b"SYNCIMG1") -> bytes:
    return struct.pack("<8sIHHHH", magic, n, c, h, w, reserved) + bytes(n * c * h * w) + bytes(2 * n)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "20-byte header"),
        (_shard(magic=b"NOTIMAGE"), "not an image shard"),
        (_shard(reserved=1), "reserved field"),
        (_shard(n=0), "1 to"),
        (_shard(c=5), "channels"),
        (_shard(h=0), "pixels a side"),
        (_shard(w=2000), "pixels a side"),
        (_shard()[:-1], "bytes, this one is"),
        (_shard() + b"\0", "bytes, this one is"),
        (struct.pack("<8sIHHHH", b"SYNCIMG1", 2**24 + 1, 4, 1024, 1024, 0), "images, not"),
        (struct.pack("<8sIHHHH", b"SYNCIMG1", 1000, 1, 8, 8, 0) + bytes(64), "bytes, this one is"),
        (_shard()[:-2] + struct.pack("<H", 10), "not below num_labels=10"),
    ],
    ids=[
        "empty",
        "magic",
        "reserved",
        "no-images",
        "channels",
        "height",
        "width",
        "truncated",
        "trailing",
        "count",
        "claims-more",
        "label",
    ],
)
def test_hostile_image_shards_are_refused_in_one_line(data: bytes, message: str) -> None:
    with pytest.raises(ImageShardError, match=message) as err:
        decode_image_shard(data, num_labels=10)
    assert "\n" not in str(err.value)


def test_a_shard_of_other_images_than_the_tasks_is_refused() -> None:
    images, labels = random_images(2, size=4)
    with pytest.raises(ImageShardError, match=r"holds \[1, 4, 4\] images; the task's are \[1, 8, 8\]"):
        adapter().decode(encode_image_shard(images, labels))


def test_encode_refuses_what_the_format_cannot_hold() -> None:
    images, _ = random_images(2)
    with pytest.raises(ImageShardError, match="uint8"):
        encode_image_shard(images.astype(np.float32), np.zeros(2, dtype=np.int64))
    with pytest.raises(ImageShardError, match="labels must lie"):
        encode_image_shard(images, np.asarray([0, 70_000]))
    with pytest.raises(ImageShardError, match="2 integers"):
        encode_image_shard(images, np.zeros(3, dtype=np.int64))


# ---------------------------------------------------------------------- pixel scaling


def test_pixel_table_is_the_documented_float64_formula_rounded_once_to_float32() -> None:
    mean, std = [0.1234, 0.5, 0.9], [0.3333, 0.25, 0.0101]
    table = pixel_table(mean, std)
    assert table.dtype == torch.float32 and table.shape == (3, 256)
    for c in range(3):
        for p in range(256):
            want = struct.unpack("<f", struct.pack("<f", ((p / 255) - mean[c]) / std[c]))[0]  # binary64 ops
            assert struct.pack("<f", float(table[c, p])) == struct.pack("<f", want)


def test_pixel_values_scale_each_channel_with_its_own_mean_and_std() -> None:
    a = adapter(num_channels=3, pixel_mean=[0.0, 0.5, 1.0], pixel_std=[1.0, 0.5, 0.25])
    images = torch.full((2, 3, 8, 8), 255, dtype=torch.uint8)
    values = a.pixel_values(images)
    assert values.dtype == torch.float32 and values.shape == (2, 3, 8, 8)
    assert values[:, 0].unique().tolist() == [1.0]
    assert values[:, 1].unique().tolist() == [1.0]
    assert values[:, 2].unique().tolist() == [0.0]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pixel_std": [0.0]}, "positive"),
        ({"pixel_mean": [0.1, 0.2]}, "list of 1 numbers"),
        ({"pixel_mean": [float("nan")]}, "finite"),
        ({"num_labels": 1}, "num_labels must be an integer from 2"),
        ({"image_size": 0}, "image_size"),
        ({"class_names": ["a"] * 10}, "distinct"),
        ({"class_names": "0123456789"}, "list of names"),
    ],
)
def test_the_adapter_refuses_bad_metadata(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        adapter(**changes)


# ---------------------------------------------------------------------- from the spec


def test_adapter_from_spec_reads_the_metadata_and_checks_the_model_against_it() -> None:
    a = adapter_from_spec(spec_for({**META, "class_names": [f"c{i}" for i in range(10)]}))
    assert (a.image_size, a.num_channels, a.num_labels, a.class_names[3]) == (8, 1, 10, "c3")
    assert (a.name, a.metric_name, a.metric_higher_is_better) == ("vision", "top1_accuracy", True)
    with pytest.raises(SpecError, match="metadata needs num_labels, pixel_std"):
        adapter_from_spec(spec_for({k: v for k, v in META.items() if k not in ("num_labels", "pixel_std")}))
    with pytest.raises(SpecError, match=r"model.config.image_size 16 disagrees with metadata.image_size 8"):
        adapter_from_spec(spec_for(META, {**TINY_VIT, "image_size": 16}))
    with pytest.raises(SpecError, match="patch_size 3 must be a positive divisor"):
        adapter_from_spec(spec_for(META, {**TINY_VIT, "patch_size": 3}))
    with pytest.raises(SpecError, match="not a vision family"):
        adapter_from_spec(spec_for(META, {**TINY_VIT, "family": "llama"}))
    with pytest.raises(SpecError, match="id2label"):
        adapter_from_spec(spec_for(META, {**TINY_VIT, "id2label": {"0": "x"}}))


def test_the_model_is_a_vit_classifier_whose_parameters_are_all_float() -> None:
    model = adapter().build_model(TINY_VIT, seed=0)
    assert type(model).__name__ == "ViTForImageClassification"
    params = trained_parameters(model)
    assert params and all(p.dtype == torch.float32 for p in params.values())
    assert not list(model.buffers())
    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    assert [n for n, _ in frozen] == ["vit.layers.0.attention.k_proj.bias"]  # softmax cancels it: frozen at 0
    assert all(not p.any() for _, p in frozen)
    same = adapter().build_model(TINY_VIT, seed=0)
    assert all(torch.equal(p, trained_parameters(same)[k]) for k, p in params.items())
    with torch.device("meta"):  # how agents compute the layout
        shapes = adapter().build_model(TINY_VIT, seed=0)
    assert ParameterLayout.from_state_dict(trained_parameters(shapes)).numel == sum(p.numel() for p in params.values())


# ---------------------------------------------------------------------- batches, loss, metric


def test_batches_are_reproducible_from_the_seed() -> None:
    a = adapter()
    shards = [encode_image_shard(*random_images(7, seed=s)) for s in (1, 2)]
    first = list(a.batches(shards, batch_size=4, seed=11, steps=3))
    again = list(a.batches(shards, batch_size=4, seed=11, steps=3))
    other = list(a.batches(shards, batch_size=4, seed=12, steps=3))
    assert len(first) == 3
    assert first[0]["pixel_values"].shape == (4, 1, 8, 8) and first[0]["pixel_values"].dtype == torch.float32
    assert first[0]["labels"].dtype == torch.int64
    for x, y in zip(first, again, strict=True):
        assert torch.equal(x["pixel_values"], y["pixel_values"]) and torch.equal(x["labels"], y["labels"])
    assert any(not torch.equal(x["labels"], y["labels"]) for x, y in zip(first, other, strict=True))
    # a batch's images come from the shards, scaled by the table
    images = torch.cat([decode_image_shard(s).images for s in shards])
    scaled = a.pixel_values(images)
    assert all(any(torch.equal(img, s) for s in scaled) for img in first[1]["pixel_values"])


def constant_classifier(a: VisionAdapter, favoured: int, margin: float) -> torch.nn.Module:
    """A real ViT whose head ignores its input: logits are ``margin`` for ``favoured``, 0 elsewhere."""
    model: Any = a.build_model(TINY_VIT, seed=0)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.bias[favoured] = margin
    return model


def test_loss_and_accuracy_on_a_known_tiny_case() -> None:
    a = adapter()
    labels = np.asarray([3, 3, 1, 3, 0, 9, 3, 2, 3, 3])
    images, _ = random_images(len(labels))
    shard = encode_image_shard(images, labels)
    model = constant_classifier(a, favoured=3, margin=2.0)
    log_z = math.log(math.exp(2.0) + 9)
    hit, miss = log_z - 2.0, log_z  # cross-entropy of a label-3 image and of any other
    want_loss = (6 * hit + 4 * miss) / 10
    assert a.evaluate(model, shard, batch_size=4, max_batches=100) == pytest.approx(want_loss, rel=1e-6)
    assert a.metric(model, shard, batch_size=4, max_batches=100) == pytest.approx(0.6)
    batch = {"pixel_values": a.pixel_values(torch.from_numpy(images)), "labels": torch.from_numpy(labels)}
    assert float(a.loss(model, batch).detach()) == pytest.approx(want_loss, rel=1e-6)
    # batch_size * max_batches = 4 of 10: the evenly spaced examples 0, 3, 6, 9 (labels 3, 3, 3, 3)
    assert a.metric(model, shard, batch_size=2, max_batches=2) == 1.0
    assert a.evaluate(model, shard, batch_size=2, max_batches=2) == pytest.approx(hit, rel=1e-6)


def test_ties_go_to_the_first_class_and_scoring_is_deterministic() -> None:
    a = adapter()
    labels = np.asarray([0, 1, 0, 2])
    shard = encode_image_shard(random_images(4)[0], labels)
    flat = constant_classifier(a, favoured=0, margin=0.0)  # every logit equal: argmax is class 0
    assert a.metric(flat, shard, batch_size=3, max_batches=5) == 0.5
    model = a.build_model(TINY_VIT, seed=1)
    model.train()
    first = (a.evaluate(model, shard, batch_size=3, max_batches=5), a.metric(model, shard, batch_size=3, max_batches=5))
    again = (a.evaluate(model, shard, batch_size=3, max_batches=5), a.metric(model, shard, batch_size=3, max_batches=5))
    assert first == again and model.training  # same bits; the model's mode is restored


# ---------------------------------------------------------------------- export


def test_the_export_loads_with_from_pretrained_and_names_the_classes(tmp_path: Path) -> None:
    from transformers import AutoModelForImageClassification

    names = [f"digit {i}" for i in range(10)]
    spec = spec_for({**META, "class_names": names})
    a = adapter_from_spec(spec)
    model: Any = a.build_model({"family": spec.model.family, **spec.model.config}, seed=3)
    model.save_pretrained(tmp_path)
    write_export_files(tmp_path, spec)
    loaded: Any = AutoModelForImageClassification.from_pretrained(tmp_path)
    assert loaded.config.id2label[4] == "digit 4" and loaded.config.label2id["digit 9"] == 9
    x = a.pixel_values(torch.from_numpy(random_images(3)[0]))
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded(pixel_values=x).logits, model(pixel_values=x).logits)
    processor = json.loads((tmp_path / EXPORT_PROCESSOR_FILE).read_text())
    assert processor["size"] == {"height": 8, "width": 8} and processor["image_mean"] == MEAN
    assert processor["rescale_factor"] == 1 / 255 and processor["image_std"] == STD
    summary = json.loads((tmp_path / EXPORT_VISION_FILE).read_text())
    assert summary["class_names"] == names and summary["num_channels"] == 1 and summary["pixel_std"] == STD
    try:
        import PIL  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return  # AutoImageProcessor needs Pillow
    from transformers import AutoImageProcessor

    proc: Any = AutoImageProcessor.from_pretrained(tmp_path)
    assert list(proc.image_mean) == MEAN


# ---------------------------------------------------------------------- replay determinism


def test_the_inner_loop_on_a_vit_replays_bit_for_bit() -> None:
    """Two runs from one state and seed give identical checkpoints, and a segment re-run from a
    checkpoint (what a referee does) reproduces the next one byte for byte."""
    a = adapter()
    shards = [encode_image_shard(*random_images(40, seed=s)) for s in (5, 6)]
    params = {k: v.detach() for k, v in trained_parameters(a.build_model(TINY_VIT, seed=0)).items()}
    layout = ParameterLayout.from_state_dict(params)
    state = TrainingState.from_model_state_dict(params, layout)
    cfg = InnerOptimizerConfig(lr=3e-3, inner_steps=6, batch_size=8)

    def run() -> tuple[bytes, ...]:
        loop = InnerLoop(a, a.build_model(TINY_VIT, seed=0), layout, cfg)
        work = loop.run(state, shards, seed=77, checkpoint_interval=3)
        assert torch.isfinite(work.pseudo_gradient).all() and work.pseudo_gradient.abs().sum() > 0
        return work.checkpoints

    first, second = run(), run()
    assert len(first) == 3 and first == second
    from syncline.protocol.checkpoints import Checkpoint

    referee = InnerLoop(a, a.build_model(TINY_VIT, seed=9), layout, cfg)
    replayed = referee.run_segment(Checkpoint.from_bytes(first[1]), shards, seed=77, start=3, stop=6)
    assert replayed == first[2]


def test_a_bf16_trainer_stays_within_the_fp32_referees_envelope() -> None:
    """An honest bf16 segment replayed in fp32 lies within the default tolerance envelope (the
    attention key biases, whose gradient is only rounding noise, are frozen and not in the state);
    the same segment trained with another learning rate does not."""
    from syncline.protocol.checkpoints import Checkpoint
    from syncline.protocol.spec import ToleranceModel
    from syncline.protocol.tolerance import compare

    a = adapter()
    config = {**TINY_VIT, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    shards = [encode_image_shard(*random_images(64, seed=s)) for s in (5, 6)]
    net = a.build_model(config, seed=0)
    params = {k: v.detach() for k, v in trained_parameters(net).items()}
    layout = ParameterLayout.from_state_dict(params)
    state = TrainingState.from_model_state_dict(params, layout)

    def checkpoints(dtype: str, lr: float) -> tuple[Checkpoint, ...]:
        cfg = InnerOptimizerConfig(lr=lr, inner_steps=8, batch_size=16)
        loop = InnerLoop(a, a.build_model(config, seed=0), layout, cfg, dtype=dtype)
        work = loop.run(state, shards, seed=9, checkpoint_interval=4)
        return tuple(Checkpoint.from_bytes(c, layout=layout) for c in work.checkpoints)

    honest, other_lr = checkpoints("bf16", 2e-3), checkpoints("fp32", 4e-3)
    cfg = InnerOptimizerConfig(lr=2e-3, inner_steps=8, batch_size=16)
    referee = InnerLoop(a, a.build_model(config, seed=0), layout, cfg)
    for s in (0, 1):
        replayed = referee.run_segment(honest[s], shards, seed=9, start=4 * s, stop=4 * s + 4, dtype="fp32")
        verdict = compare(
            honest[s], honest[s + 1], Checkpoint.from_bytes(replayed, layout=layout), layout, ToleranceModel()
        )
        assert verdict.within, verdict
    replayed = referee.run_segment(honest[0], shards, seed=9, start=0, stop=4, dtype="fp32")
    assert not compare(
        honest[0], other_lr[1], Checkpoint.from_bytes(replayed, layout=layout), layout, ToleranceModel()
    ).within
