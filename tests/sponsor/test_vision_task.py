"""The sponsor side of a vision task: the digits, bring-your-own images (``.npz`` and class
folders), the held-out split, the shards and what ``publish_vision_task`` puts in the blob store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from syncline.blobstore import LocalBlobStore
from syncline.errors import SpecError
from syncline.modality.vision import adapter_from_spec, decode_image_shard
from syncline.protocol.state import TrainingState
from syncline.sponsor.data_sources import DataSourceError
from syncline.sponsor.task_defaults import TaskDefaults, default_task
from syncline.sponsor.vision_task import (
    DEFAULT_VISION_MODEL,
    ImageSource,
    check_vision_template,
    pixel_statistics,
    prepare_images,
    publish_vision_task,
    read_images,
    validation_mask,
)

WITNESSES = ["0x" + f"{i:02x}" * 20 for i in (0x44, 0x55, 0x66)]
SPONSOR = "0x" + "77" * 20


def test_the_digits_are_the_default_source() -> None:
    data = read_images()
    assert data.images.shape == (1797, 1, 8, 8) and data.images.dtype == np.uint8
    assert data.class_names == tuple(str(i) for i in range(10))
    assert int(data.images.max()) == 255 and int(data.images.min()) == 0  # 16 -> 255
    assert sorted(set(data.labels.tolist())) == list(range(10))


def test_validation_holds_every_kth_image_of_each_class() -> None:
    labels = np.asarray([0, 1, 0, 0, 1, 0, 1, 1, 0, 1])
    mask = validation_mask(labels, every=2)
    # class 0 at 0, 2, 3, 5, 8 -> 2nd and 4th (2, 5); class 1 at 1, 4, 6, 7, 9 -> 4, 7
    assert np.flatnonzero(mask).tolist() == [2, 4, 5, 7]
    assert validation_mask(read_images().labels).sum() == 355


def test_prepared_digits_shards_are_class_balanced_and_disjoint_from_validation() -> None:
    data = read_images()
    prepared = prepare_images(data, shard_count=6)
    shards = [decode_image_shard(s) for s in prepared.shards]
    validation = decode_image_shard(prepared.validation)
    assert len(validation) == prepared.validation_images == 355
    assert sum(len(s) for s in shards) == prepared.train_images == 1797 - 355
    for s in shards:
        counts = np.bincount(s.labels.numpy(), minlength=10)
        assert counts.min() >= 23 and counts.max() - counts.min() <= 7
    train_rows = {bytes(img.numpy().tobytes()) for s in shards for img in s.images}
    held = [bytes(img.numpy().tobytes()) for img in validation.images]
    assert sum(h in train_rows for h in held) < 5  # only the digits' few exact duplicates
    assert prepared.metadata()["num_labels"] == 10 and prepared.image_size == 8
    assert 0.25 < prepared.pixel_mean[0] < 0.35 and 0.3 < prepared.pixel_std[0] < 0.45


def write_npz(path: Path, **arrays: Any) -> Path:
    np.savez_compressed(path, **arrays)
    return path


def test_an_npz_source_in_any_layout_with_class_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.random((12, 6, 6, 3))  # floats in [0, 1], channels last
    labels = np.arange(12) % 3
    path = write_npz(tmp_path / "pets.npz", images=images, labels=labels, class_names=np.asarray(["cat", "dog", "owl"]))
    data = read_images(ImageSource.from_mapping({"type": "npz", "path": str(path)}))
    assert data.images.shape == (12, 3, 6, 6) and data.class_names == ("cat", "dog", "owl")
    assert np.array_equal(data.images[4, 2], np.round(images[4, :, :, 2] * 255).astype(np.uint8))
    resized = read_images(ImageSource(type="npz", path=path), image_size=4)
    assert resized.images.shape == (12, 3, 4, 4)
    with pytest.raises(DataSourceError, match="3 channels, not num_channels=1"):
        read_images(ImageSource(type="npz", path=path), num_channels=1)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"images": np.zeros((2, 4, 4), np.uint8)}, "needs arrays images and labels"),
        ({"images": np.zeros((2, 4, 4), np.uint8), "labels": np.asarray([0, 1, 1])}, "2 integers"),
        ({"images": np.zeros((2, 4, 4), np.uint8), "labels": np.asarray([0, -1])}, "labels must lie"),
        ({"images": np.full((2, 4, 4), np.nan), "labels": np.asarray([0, 1])}, "finite"),
        ({"images": np.full((2, 4, 4), 300), "labels": np.asarray([0, 1])}, "0..255"),
        ({"images": np.zeros((2, 5, 6, 7), np.uint8), "labels": np.asarray([0, 1])}, "1, 3 or 4 channels"),
        ({"images": np.zeros((2, 4, 4), np.uint8), "labels": np.asarray([0, 0])}, "at least 2 classes"),
        (
            {"images": np.zeros((2, 4, 4), np.uint8), "labels": np.asarray([0, 2]), "class_names": np.asarray(["a"])},
            "no name",
        ),
        ({"images": np.zeros((2, 4, 4), np.uint8), "labels": np.asarray(["a", "b"])}, "integers"),
    ],
    ids=["no-labels", "count", "negative", "nan", "range", "channels", "one-class", "unnamed", "string-labels"],
)
def test_bad_npz_sources_are_refused_in_one_line(tmp_path: Path, arrays: dict[str, Any], message: str) -> None:
    path = write_npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataSourceError, match=message) as err:
        read_images(ImageSource(type="npz", path=path))
    assert "\n" not in str(err.value)


def test_npz_sources_are_bounded_and_never_unpickled(tmp_path: Path) -> None:
    objects = tmp_path / "objects.npz"
    np.savez(objects, images=np.asarray([{"x": 1}], dtype=object), labels=np.asarray([0]))
    with pytest.raises(DataSourceError, match="without pickles"):
        read_images(ImageSource(type="npz", path=objects))
    big = write_npz(tmp_path / "zeros.npz", images=np.zeros((64, 64, 64), np.uint8), labels=np.arange(64) % 2)
    assert big.stat().st_size < 20_000  # compresses well, unpacks to 256 KiB
    with pytest.raises(DataSourceError, match="unpacks to"):
        read_images(ImageSource(type="npz", path=big, max_bytes=100_000))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataSourceError, match=r"not a readable \.npz"):
        read_images(ImageSource(type="npz", path=tmp_path / "junk.npz"))


def test_a_folder_of_images_per_class(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name, count in (("zebra", 3), ("ant", 2)):
        (tmp_path / name).mkdir()
        for i in range(count):
            np.save(tmp_path / name / f"{i}.npy", rng.integers(0, 256, (5, 5), dtype=np.uint8))
    (tmp_path / "ant" / "notes.txt").write_text("ignored")
    data = read_images(ImageSource.from_mapping({"type": "image_folder", "path": str(tmp_path)}))
    assert data.class_names == ("ant", "zebra") and data.labels.tolist() == [0, 0, 1, 1, 1]
    assert np.array_equal(data.images[2, 0], np.load(tmp_path / "zebra" / "0.npy"))
    assert read_images(ImageSource(type="image_folder", path=tmp_path), image_size=8).images.shape == (5, 1, 8, 8)
    np.save(tmp_path / "ant" / "big.npy", np.zeros((7, 7), np.uint8))
    with pytest.raises(DataSourceError, match="give an image_size"):
        read_images(ImageSource(type="image_folder", path=tmp_path))
    with pytest.raises(DataSourceError, match="or 2 images of files"):
        read_images(ImageSource(type="image_folder", path=tmp_path, max_images=2), image_size=8)


def test_folder_images_other_than_arrays_need_pillow(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    try:
        import PIL  # type: ignore[import-not-found, unused-ignore]  # noqa: F401

        message = "not a readable image"
    except ImportError:
        message = "needs Pillow, which is not installed"
    with pytest.raises(DataSourceError, match=message):
        read_images(ImageSource(type="image_folder", path=tmp_path))


def test_image_source_descriptions(tmp_path: Path) -> None:
    assert ImageSource.from_mapping({}) == ImageSource.digits()
    with pytest.raises(DataSourceError, match="type 'mnist' is not one of digits, image_folder, npz"):
        ImageSource.from_mapping({"type": "mnist"})
    with pytest.raises(DataSourceError, match="takes no path"):
        ImageSource.from_mapping({"type": "digits", "path": "x"})
    with pytest.raises(DataSourceError, match="needs a path"):
        ImageSource.from_mapping({"type": "npz"})
    with pytest.raises(DataSourceError, match="unknown field 'glob'"):
        ImageSource.from_mapping({"type": "npz", "path": "x", "glob": "*"})
    with pytest.raises(DataSourceError, match="outside the data directory"):
        ImageSource.from_mapping({"type": "npz", "path": "../x.npz"}, root=tmp_path / "data")
    with pytest.raises(DataSourceError, match="not an existing file"):
        read_images(ImageSource.from_mapping({"type": "npz", "path": "missing.npz"}, base_dir=tmp_path))


def template() -> dict[str, Any]:
    return default_task(TaskDefaults(), WITNESSES, now=1_000)


def test_publish_vision_task_puts_every_artifact_and_a_spec_agents_read(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    published = publish_vision_task(blobs, template={**template(), "name": "digits"}, shard_count=6)
    spec = published.spec
    assert spec.modality.name == "VISION" and spec.model.family == "vit"
    assert spec.model.config["image_size"] == 8 and spec.model.config["num_labels"] == 10
    meta = dict(spec.metadata)
    assert {k: meta[k] for k in ("image_size", "num_channels", "num_labels")} == {
        "image_size": 8,
        "num_channels": 1,
        "num_labels": 10,
    }
    assert meta["class_names"] == [str(i) for i in range(10)] and len(meta["pixel_mean"]) == 1
    assert meta["initial_state"] == {"uri": published.initial_state.state_root_hex}
    assert spec.param_count == published.initial_state.layout.numel
    assert blobs.get(spec.spec_hash) == spec.canonical_bytes()
    adapter = adapter_from_spec(spec)
    for digest in spec.dataset.shard_hashes:
        assert len(adapter.decode(blobs.get(digest))) in (240, 241, 242)
    assert spec.dataset.validation_hash is not None
    assert len(adapter.decode(blobs.get(spec.dataset.validation_hash))) == 355
    state = TrainingState.from_bytes(blobs.get(blobs.resolve(published.initial_state.state_root_hex)))
    assert state.state_root_hex == published.initial_state.state_root_hex
    with pytest.raises(SpecError, match="param_count 5 disagrees"):
        publish_vision_task(blobs, template={**template(), "param_count": 5}, shard_count=6)


def test_check_vision_template_validates_before_any_upload() -> None:
    spec = check_vision_template(template(), shard_count=6, now=1_000, sponsor=SPONSOR)
    assert spec.modality.name == "VISION"
    with pytest.raises(SpecError, match="patch_size 3"):
        check_vision_template(
            template(), shard_count=6, model={**DEFAULT_VISION_MODEL, "patch_size": 3}, now=1_000, sponsor=SPONSOR
        )
    with pytest.raises(SpecError, match="not a vision family"):
        check_vision_template(template(), shard_count=6, model={"family": "llama"}, now=1_000, sponsor=SPONSOR)
    with pytest.raises(SpecError):
        check_vision_template(template(), shard_count=2, now=1_000, sponsor=SPONSOR)  # fewer shards than trainers


def test_pixel_statistics_are_the_rounded_mean_and_std_of_each_channel() -> None:
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (50, 3, 4, 4), dtype=np.uint8)
    images[:, 2] = 7  # a constant channel: the std floor
    mean, std = pixel_statistics(images)
    x = images.astype(np.float64) / 255
    assert mean == tuple(round(float(v), 4) for v in x.mean(axis=(0, 2, 3)))
    assert std[:2] == tuple(round(float(v), 4) for v in x.std(axis=(0, 2, 3)))[:2]
    assert std[2] == 0.001
