"""The sponsor side of a vision task: read labelled images, split off a held-out validation set,
encode the image shards (docs/protocol.md §12.6), build the initial ViT state and publish it all.

Image sources (:class:`ImageSource`, ``{type, path}``):

``digits``
    scikit-learn's packaged handwritten digits (``load_digits``: 1,797 grayscale 8x8 images of
    10 classes, pixel values 0..16 scaled to 0..255 as ``round(v * 255 / 16)``). The default.
``image_folder``
    ``path/<class>/<image>``: one subdirectory per class (classes in sorted name order), its
    ``.png``/``.jpg``/``.jpeg``/``.bmp``/``.gif``/``.webp`` files decoded with Pillow (when it is
    installed) and its ``.npy`` files (uint8 ``[H, W]`` or ``[H, W, C]``) with numpy.
``npz``
    A numpy ``.npz`` archive with ``images`` (uint8 0..255 or floats in [0, 1]; ``[N, H, W]``,
    ``[N, H, W, C]`` or ``[N, C, H, W]`` with 1, 3 or 4 channels), ``labels`` (``N`` integers >= 0)
    and optionally ``class_names`` (strings, indexed by label). Read without pickles.

Images of another size than the task's are resized (bilinear, antialiased) to a square of
``image_size``. Every read is bounded (bytes, images) and stops with a one-line
:class:`~syncline.sponsor.data_sources.DataSourceError`.

Validation: within every class, in source order, every ``validation_every``-th image (the
``k``-th, ``2k``-th, ...) is held out. Training images are sorted by class (stably) and dealt
round-robin into the shards, so every shard holds every class in the same proportions.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from eth_account.signers.local import LocalAccount

from syncline.blobstore import BlobStore
from syncline.errors import SpecError
from syncline.modality.lora import trained_parameters
from syncline.modality.vision import (
    FAMILIES,
    MAX_CHANNELS,
    MAX_CLASS_NAME_CHARS,
    MAX_IMAGE_SIZE,
    MAX_LABELS,
    VisionAdapter,
    encode_image_shard,
)
from syncline.protocol.layout import ParameterLayout
from syncline.protocol.spec import TrainingTaskSpec
from syncline.protocol.state import TrainingState
from syncline.sponsor.data_sources import DataSourceError
from syncline.sponsor.task_builder import PublishedTask, publish_initial_state

ImageSourceType = Literal["digits", "image_folder", "npz"]
IMAGE_SOURCE_TYPES: tuple[ImageSourceType, ...] = ("digits", "image_folder", "npz")
PILLOW_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
ARRAY_SUFFIX = ".npy"
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_MAX_IMAGES = 200_000
MAX_DECODED_PIXELS = 1 << 26
"""Largest image (width x height) a folder source decodes (Pillow's decompression-bomb guard)."""
RESIZE_CHUNK = 1024
"""Images resized at a time."""
DEFAULT_VALIDATION_EVERY = 5
"""Every 5th image of each class is held out (20 %)."""
STATS_DECIMALS = 4
"""``pixel_mean`` and ``pixel_std`` are the training images' statistics rounded to 4 decimals."""
MIN_PIXEL_STD = 1e-3
DEFAULT_VISION_MODEL: dict[str, Any] = {
    "family": "vit",
    "patch_size": 2,
    "hidden_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 192,
}
"""A small ViT for 8x8 digits: 16 patches of 2x2 pixels, 2 layers of width 96 (~150k parameters)."""


# ---------------------------------------------------------------------- sources


@dataclass(frozen=True)
class ImageSource:
    """A sponsor's image source (the path resolved; confined under ``root`` when set)."""

    type: ImageSourceType = "digits"
    path: Path | None = None
    root: Path | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    max_images: int = DEFAULT_MAX_IMAGES

    @classmethod
    def digits(cls) -> ImageSource:
        return cls(type="digits")

    @classmethod
    def from_mapping(
        cls,
        raw: Mapping[str, Any],
        *,
        base_dir: Path | None = None,
        root: Path | None = None,
        label: str = "image_source",
    ) -> ImageSource:
        """``{type: digits}``, ``{type: image_folder, path}`` or ``{type: npz, path}``; a relative
        path is read from ``base_dir`` (or ``root`` when the source is confined under it)."""
        unknown = sorted(set(raw) - {"type", "path", "max_bytes", "max_images"})
        if unknown:
            raise DataSourceError(f"{label}: unknown field {unknown[0]!r}; use type, path, max_bytes, max_images")
        kind = raw.get("type", "digits")
        if kind not in IMAGE_SOURCE_TYPES:
            raise DataSourceError(f"{label}.type {kind!r} is not one of {', '.join(IMAGE_SOURCE_TYPES)}")
        limits: dict[str, int] = {}
        for key, default in (("max_bytes", DEFAULT_MAX_BYTES), ("max_images", DEFAULT_MAX_IMAGES)):
            value = raw.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise DataSourceError(f"{label}.{key}: expected a positive integer, got {value!r}")
            limits[key] = value
        if kind == "digits":
            if raw.get("path") is not None:
                raise DataSourceError(f"{label}.path: the digits data set is packaged; it takes no path")
            return cls(type="digits", max_bytes=limits["max_bytes"], max_images=limits["max_images"])
        path = raw.get("path")
        if not isinstance(path, str) or not path:
            raise DataSourceError(f"{label}.path: a {kind} source needs a path")
        resolved = Path(path).expanduser()
        if not resolved.is_absolute():
            resolved = (root if root is not None else base_dir or Path.cwd()) / resolved
        resolved = resolved.resolve()
        if root is not None and not resolved.is_relative_to(root.resolve()):
            raise DataSourceError(f"{label}.path {path!r} is outside the data directory")
        return cls(
            type=kind,
            path=resolved,
            root=root.resolve() if root is not None else None,
            max_bytes=limits["max_bytes"],
            max_images=limits["max_images"],
        )


@dataclass(frozen=True)
class LabelledImages:
    """Images as uint8 ``[N, C, H, W]`` with labels (int64 ``[N]``) and the classes' names."""

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)``."""
        _, c, h, w = self.images.shape
        return int(c), int(h), int(w)


def read_images(
    source: ImageSource | None = None, *, image_size: int | None = None, num_channels: int | None = None
) -> LabelledImages:
    """The labelled images of ``source`` (default: the digits), resized to ``image_size`` x
    ``image_size`` when given (a source of non-square or unequal images needs it); ``num_channels``,
    when given, must be the images' own (1 grayscale, 3 RGB)."""
    source = source or ImageSource.digits()
    if image_size is not None and not 1 <= image_size <= MAX_IMAGE_SIZE:
        raise DataSourceError(f"image_size {image_size} must lie in 1..{MAX_IMAGE_SIZE}")
    if source.type == "digits":
        loaded = _digits()
    elif source.type == "npz":
        loaded = _read_npz(_existing(source, file=True), source)
    else:
        loaded = _read_folder(_existing(source, file=False), source, image_size=image_size, channels=num_channels)
    if len(loaded.labels) > source.max_images:
        raise DataSourceError(f"the source holds {len(loaded.labels)} images; at most {source.max_images}")
    c, h, w = loaded.shape
    if num_channels is not None and c != num_channels:
        raise DataSourceError(f"the source's images have {c} channels, not num_channels={num_channels}")
    if image_size is None:
        if h != w:
            raise DataSourceError(f"the source's images are {h}x{w}: give an image_size to resize them to a square")
        return loaded
    if (h, w) == (image_size, image_size):
        return loaded
    return LabelledImages(resize(loaded.images, image_size), loaded.labels, loaded.class_names)


def resize(images: np.ndarray, size: int) -> np.ndarray:
    """uint8 ``[N, C, H, W]`` images resized to ``size`` x ``size`` (bilinear, antialiased, rounded)."""
    out = np.empty((images.shape[0], images.shape[1], size, size), dtype=np.uint8)
    for start in range(0, len(images), RESIZE_CHUNK):  # a float copy of one chunk at a time
        x = torch.from_numpy(np.ascontiguousarray(images[start : start + RESIZE_CHUNK])).float()
        y = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        out[start : start + RESIZE_CHUNK] = y.round().clamp(0, 255).to(torch.uint8).numpy()
    return out


def _digits() -> LabelledImages:
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    data = load_digits()
    images = np.round(np.asarray(data.images, dtype=np.float64) * 255 / 16).astype(np.uint8)[:, None]
    return LabelledImages(images, np.asarray(data.target, dtype=np.int64), tuple(str(c) for c in data.target_names))


def _existing(source: ImageSource, *, file: bool) -> Path:
    path = source.path
    if path is None or not (path.is_file() if file else path.is_dir()):
        raise DataSourceError(f"{source.type} source: {path} is not an existing {'file' if file else 'directory'}")
    return path


def _read_npz(path: Path, source: ImageSource) -> LabelledImages:
    """``images``, ``labels`` and optional ``class_names`` of an ``.npz`` (bounded, no pickles)."""
    if path.stat().st_size > source.max_bytes:
        raise DataSourceError(f"{path.name}: {path.stat().st_size} bytes; a source holds at most {source.max_bytes}")
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > source.max_bytes:
            raise DataSourceError(
                f"{path.name}: unpacks to {unpacked} bytes; a source holds at most {source.max_bytes}"
            )
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("images", "labels") if k not in npz.files]
            if missing:
                raise DataSourceError(f"{path.name}: needs arrays images and labels; it has {', '.join(npz.files)}")
            raw_images, raw_labels = npz["images"], npz["labels"]
            names = npz["class_names"] if "class_names" in npz.files else None
    except DataSourceError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataSourceError(f"{path.name}: not a readable .npz without pickles ({_one_line(exc)})") from None
    images = _as_nchw(_as_uint8(raw_images, path.name), path.name)
    labels = _as_labels(raw_labels, len(images), path.name)
    if names is None:
        class_names = tuple(str(i) for i in range(int(labels.max()) + 1))
    else:
        if names.ndim != 1 or names.dtype.kind not in "US":
            raise DataSourceError(f"{path.name}: class_names must be a 1-D array of strings")
        class_names = tuple(str(n) for n in names.tolist())
        if int(labels.max()) >= len(class_names):
            raise DataSourceError(f"{path.name}: label {int(labels.max())} has no name in class_names")
    return LabelledImages(images, labels, _check_names(class_names, path.name))


def _as_uint8(array: np.ndarray, where: str) -> np.ndarray:
    if array.dtype == np.uint8:
        return array
    if array.dtype.kind in "iu":
        if array.size and (int(array.min()) < 0 or int(array.max()) > 255):
            raise DataSourceError(f"{where}: integer pixels must lie in 0..255")
        return array.astype(np.uint8)
    if array.dtype.kind == "f":
        if not np.isfinite(array).all() or (array.size and (float(array.min()) < 0 or float(array.max()) > 1)):
            raise DataSourceError(f"{where}: float pixels must be finite and lie in [0, 1]")
        return np.round(array.astype(np.float64) * 255).astype(np.uint8)
    raise DataSourceError(f"{where}: pixels must be uint8 or floats in [0, 1], got {array.dtype}")


def _as_nchw(images: np.ndarray, where: str) -> np.ndarray:
    """``[N, H, W]`` (grayscale), ``[N, H, W, C]`` or ``[N, C, H, W]`` with C in 1, 3, 4 as ``[N, C, H, W]``."""
    if images.ndim == 3:
        images = images[:, None]
    elif images.ndim == 4 and images.shape[-1] in (1, 3, 4) and images.shape[1] not in (1, 3, 4):
        images = images.transpose(0, 3, 1, 2)
    elif not (images.ndim == 4 and images.shape[1] in (1, 3, 4)):
        raise DataSourceError(
            f"{where}: images must be [N, H, W], [N, H, W, C] or [N, C, H, W] with 1, 3 or 4 channels; "
            f"got {list(images.shape)}"
        )
    n, c, h, w = images.shape
    if n == 0 or c > MAX_CHANNELS or not (1 <= h <= MAX_IMAGE_SIZE and 1 <= w <= MAX_IMAGE_SIZE):
        raise DataSourceError(f"{where}: {n} images of {h}x{w}; need at least one, at most {MAX_IMAGE_SIZE} a side")
    return np.ascontiguousarray(images)


def _as_labels(labels: np.ndarray, count: int, where: str) -> np.ndarray:
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or len(labels) != count:
        raise DataSourceError(
            f"{where}: labels must be {count} integers (one per image), got {labels.dtype} {list(labels.shape)}"
        )
    if int(labels.min()) < 0 or int(labels.max()) >= MAX_LABELS:
        raise DataSourceError(f"{where}: labels must lie in 0..{MAX_LABELS - 1}")
    return labels.astype(np.int64)


def _check_names(names: Sequence[str], where: str) -> tuple[str, ...]:
    if len(names) < 2:
        raise DataSourceError(f"{where}: a classification task needs at least 2 classes, found {len(names)}")
    if len(names) > MAX_LABELS:
        raise DataSourceError(f"{where}: {len(names)} classes; at most {MAX_LABELS}")
    for name in names:
        if not 0 < len(name) <= MAX_CLASS_NAME_CHARS:
            raise DataSourceError(f"{where}: class name {name[:40]!r} must have 1 to {MAX_CLASS_NAME_CHARS} characters")
    if len(set(names)) != len(names):
        raise DataSourceError(f"{where}: class names must be distinct")
    return tuple(names)


def _read_folder(path: Path, source: ImageSource, *, image_size: int | None, channels: int | None) -> LabelledImages:
    """``path/<class>/<image>``: classes in sorted name order, files in sorted name order."""
    classes = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    names = _check_names(classes, path.name)
    files: list[tuple[int, Path]] = []
    total = 0
    for label, name in enumerate(names):
        for f in sorted((path / name).iterdir()):
            suffix = f.suffix.lower()
            if not f.is_file() or f.name.startswith(".") or suffix not in (*PILLOW_SUFFIXES, ARRAY_SUFFIX):
                continue
            if source.root is not None and not f.resolve().is_relative_to(source.root):
                raise DataSourceError(f"{name}/{f.name} links outside the data directory")
            total += f.stat().st_size
            if total > source.max_bytes or len(files) >= source.max_images:
                raise DataSourceError(
                    f"{path.name}: more than {source.max_bytes} bytes or {source.max_images} images of files"
                )
            files.append((label, f))
    if not files:
        raise DataSourceError(
            f"{path.name}: no images (class folders of {', '.join((*PILLOW_SUFFIXES, ARRAY_SUFFIX))} files)"
        )
    decoded = [_read_image(f, channels, f"{names[label]}/{f.name}") for label, f in files]
    size = image_size
    if size is None:
        shapes = {a.shape for a in decoded}
        h, w = decoded[0].shape[1:]
        if len(shapes) != 1 or h != w:
            raise DataSourceError(f"{path.name}: the images differ in size or are not square; give an image_size")
        size = h
    want_c = channels or decoded[0].shape[0]
    out = np.empty((len(decoded), want_c, size, size), dtype=np.uint8)
    for i, (array, (label, f)) in enumerate(zip(decoded, files, strict=True)):
        if array.shape[0] != want_c:
            raise DataSourceError(f"{names[label]}/{f.name}: {array.shape[0]} channels, the others have {want_c}")
        out[i] = array if array.shape[1:] == (size, size) else resize(array[None], size)[0]
    labels = np.asarray([label for label, _ in files], dtype=np.int64)
    return LabelledImages(out, labels, names)


def _read_image(path: Path, channels: int | None, where: str) -> np.ndarray:
    """One image file as uint8 ``[C, H, W]``."""
    if path.suffix.lower() == ARRAY_SUFFIX:
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise DataSourceError(f"{where}: not a readable .npy array ({_one_line(exc)})") from None
        if array.ndim == 2:
            array = array[:, :, None]
        if array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
            raise DataSourceError(f"{where}: an image array is [H, W] or [H, W, C], got {list(array.shape)}")
        array = _as_uint8(array, where)
    else:
        array = _decode_with_pillow(path, channels, where)
    h, w = array.shape[:2]
    if not (1 <= h <= MAX_IMAGE_SIZE * 8 and 1 <= w <= MAX_IMAGE_SIZE * 8):
        raise DataSourceError(f"{where}: {h}x{w} pixels is too large")
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def _decode_with_pillow(path: Path, channels: int | None, where: str) -> np.ndarray:
    try:
        from PIL import Image, UnidentifiedImageError  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise DataSourceError(
            f"{where}: decoding {path.suffix} files needs Pillow, which is not installed; "
            "give .npy arrays or an .npz source instead"
        ) from None
    try:
        with Image.open(path) as im:
            if im.size[0] * im.size[1] > MAX_DECODED_PIXELS:
                raise DataSourceError(f"{where}: {im.size[0]}x{im.size[1]} pixels is too large")
            mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(
                channels or 0, "RGB" if im.mode not in ("L", "1", "I", "F") else "L"
            )
            array = np.asarray(im.convert(mode), dtype=np.uint8)
    except DataSourceError:
        raise
    except (OSError, ValueError, UnidentifiedImageError) as exc:
        raise DataSourceError(f"{where}: not a readable image ({_one_line(exc)})") from None
    return array[:, :, None] if array.ndim == 2 else array


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


# ---------------------------------------------------------------------- split and shards


def validation_mask(labels: np.ndarray, every: int = DEFAULT_VALIDATION_EVERY) -> np.ndarray:
    """True for the held-out images: within each class, in source order, the ``every``-th,
    ``2 * every``-th, ... image."""
    if every < 2:
        raise DataSourceError(f"validation_every {every} must be at least 2")
    mask = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        mask[members[every - 1 :: every]] = True
    return mask


def pixel_statistics(images: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of uint8 ``[N, C, H, W]`` images in ``[0, 1]`` units
    (from each channel's 256-bin histogram: no float copy of the images), rounded to
    :data:`STATS_DECIMALS` decimals; the std at least :data:`MIN_PIXEL_STD`."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    mean: list[float] = []
    std: list[float] = []
    for c in range(images.shape[1]):
        counts = np.bincount(images[:, c].reshape(-1), minlength=256).astype(np.float64)
        weights = counts / counts.sum()
        m = float((weights * levels).sum())
        mean.append(round(m, STATS_DECIMALS))
        std.append(max(round(float(np.sqrt((weights * (levels - m) ** 2).sum())), STATS_DECIMALS), MIN_PIXEL_STD))
    return tuple(mean), tuple(std)


@dataclass(frozen=True)
class PreparedImages:
    """A vision task's data as published: training shards, the validation shard and the metadata
    every party reads (the pixel scaling is the training images' statistics)."""

    shards: tuple[bytes, ...]
    validation: bytes
    image_size: int
    num_channels: int
    class_names: tuple[str, ...]
    pixel_mean: tuple[float, ...]
    pixel_std: tuple[float, ...]
    train_images: int
    validation_images: int

    def metadata(self) -> dict[str, Any]:
        """The spec's vision keys (docs/protocol.md §12.6)."""
        return {
            "image_size": self.image_size,
            "num_channels": self.num_channels,
            "num_labels": len(self.class_names),
            "pixel_mean": list(self.pixel_mean),
            "pixel_std": list(self.pixel_std),
            "class_names": list(self.class_names),
        }


def prepare_images(
    data: LabelledImages, *, shard_count: int, validation_every: int = DEFAULT_VALIDATION_EVERY
) -> PreparedImages:
    """Split ``data`` (:func:`validation_mask`), deal the training images into ``shard_count``
    class-balanced shards and encode everything (:func:`~syncline.modality.vision.encode_image_shard`)."""
    if shard_count < 1:
        raise SpecError("shard_count must be at least 1")
    held_out = validation_mask(data.labels, validation_every)
    train = np.flatnonzero(~held_out)
    train = train[np.argsort(data.labels[train], kind="stable")]
    if held_out.sum() == 0 or len(train) < shard_count:
        raise DataSourceError(
            f"the source is too small: {len(data.labels)} images give {len(train)} training images for "
            f"{shard_count} shards and {int(held_out.sum())} validation images (every {validation_every}th of a class)"
        )
    c, size, _ = data.shape
    mean, std = pixel_statistics(data.images[train])
    shards = tuple(
        encode_image_shard(data.images[train[i::shard_count]], data.labels[train[i::shard_count]])
        for i in range(shard_count)
    )
    validation = encode_image_shard(data.images[held_out], data.labels[held_out])
    return PreparedImages(shards, validation, size, c, data.class_names, mean, std, len(train), int(held_out.sum()))


# ---------------------------------------------------------------------- publishing


def _split_model(model: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    family = str(model.get("family", "vit"))
    if family not in FAMILIES:
        raise SpecError(f"model family {family!r} is not a vision family ({', '.join(FAMILIES)})")
    return family, {k: v for k, v in model.items() if k != "family"}


def publish_vision_task(
    blobs: BlobStore,
    *,
    template: Mapping[str, Any],
    shard_count: int,
    model: Mapping[str, Any] = DEFAULT_VISION_MODEL,
    source: ImageSource | None = None,
    image_size: int | None = None,
    num_channels: int | None = None,
    validation_every: int = DEFAULT_VALIDATION_EVERY,
    seed: int = 0,
    sponsor: LocalAccount | None = None,
) -> PublishedTask:
    """Publish every artifact of a vision task and return its spec (not yet posted on chain).

    ``model`` is a ViT architecture (``{family: vit, patch_size, hidden_size, ...}``, randomly
    initialised from ``seed``); the task's ``image_size``, ``num_channels`` and ``num_labels`` are
    written into its config. The source (default: the digits) is read, split and checked, and the
    model built, before anything is uploaded. ``template`` holds the remaining spec fields as in
    :func:`~syncline.sponsor.task_builder.publish_language_task`; ``param_count`` is filled in.
    """
    family, config = _split_model(model)
    data = read_images(source, image_size=image_size, num_channels=num_channels)
    prepared = prepare_images(data, shard_count=shard_count, validation_every=validation_every)
    meta = prepared.metadata()
    adapter = VisionAdapter(
        image_size=prepared.image_size,
        num_channels=prepared.num_channels,
        num_labels=len(prepared.class_names),
        pixel_mean=prepared.pixel_mean,
        pixel_std=prepared.pixel_std,
        class_names=prepared.class_names,
    )
    config = {**config, **{k: meta[k] for k in ("image_size", "num_channels", "num_labels") if k not in config}}
    net = adapter.build_model({"family": family, **config}, seed=seed)
    params = {k: v.detach() for k, v in trained_parameters(net).items()}
    initial = TrainingState.from_model_state_dict(params, ParameterLayout.from_state_dict(params))

    spec_data = dict(template)
    typed = spec_data.get("param_count")
    if typed is not None and str(typed) != str(initial.layout.numel):
        raise SpecError(
            f"param_count {typed} disagrees with the model ({initial.layout.numel} parameters); "
            "leave it out, the sponsor tooling fills it in"
        )
    shard_refs = [blobs.put(s) for s in prepared.shards]
    validation = blobs.put(prepared.validation)
    publish_initial_state(blobs, initial, sponsor)
    spec_data.update(
        modality="vision",
        model={"family": family, "config": config},
        dataset={
            "shard_hashes": [r.digest for r in shard_refs],
            "shard_uris": [r.uri for r in shard_refs],
            "validation_hash": validation.digest,
            "validation_uri": validation.uri,
        },
        initial_state_root=initial.state_root_hex,
        param_count=initial.layout.numel,
        metadata={
            **dict(spec_data.get("metadata", {})),
            **meta,
            "initial_state": {"uri": initial.state_root_hex},
        },
    )
    spec = TrainingTaskSpec.from_mapping(spec_data)
    ref = blobs.put(spec.canonical_bytes())
    if ref.digest != spec.spec_hash:
        raise RuntimeError("spec blob digest differs from the spec hash")  # keccak of the same bytes
    return PublishedTask(spec=spec, spec_uri=ref.uri, initial_state=initial)


def check_vision_template(
    template: Mapping[str, Any],
    *,
    shard_count: int,
    model: Mapping[str, Any] = DEFAULT_VISION_MODEL,
    now: int,
    sponsor: str,
    image_size: int = 8,
    num_channels: int = 1,
    num_labels: int = 10,
) -> TrainingTaskSpec:
    """Validate a sponsor's vision-task template before any artifact is built or uploaded: the
    model builds (on the ``meta`` device) for images of ``image_size`` x ``image_size`` with
    ``num_channels`` channels and ``num_labels`` classes, and every rule ``postTask`` enforces holds
    on a provisional spec (placeholder artifacts). Returns the provisional spec."""
    family, config = _split_model(model)
    adapter = VisionAdapter(
        image_size=image_size,
        num_channels=num_channels,
        num_labels=num_labels,
        pixel_mean=[0.5] * num_channels,
        pixel_std=[0.5] * num_channels,
    )
    with torch.device("meta"):
        adapter.build_model({"family": family, **config}, seed=0)
    placeholder = "0x" + "5c" * 32
    data = dict(template)
    data.update(
        modality="vision",
        model={"family": family, "config": config},
        dataset={"shard_hashes": [placeholder] * shard_count},
        initial_state_root=placeholder,
        param_count=data.get("param_count") or 1,
    )
    return TrainingTaskSpec.from_mapping(data).validate(now=now, sponsor=sponsor)
