"""Vision modality: image classification with a ``transformers`` ViT built from a config.

A task's images travel as **image shards** (:func:`encode_image_shard`, docs/protocol.md §12.6): a
20-byte header, the pixels as uint8 ``[N, C, H, W]`` and the labels as little-endian uint16. Every
party turns a pixel ``p`` of channel ``c`` into the same float32, ``((p / 255) - mean[c]) / std[c]``
computed in float64 and rounded once to float32 (:func:`pixel_table`), with the ``pixel_mean`` and
``pixel_std`` the spec's metadata pins. The training loss is the mean cross-entropy of a batch;
a witness's metric is the top-1 accuracy on the held-out shard (a fraction in ``[0, 1]``).

Shards are hostile bytes: :func:`decode_image_shard` checks the magic, the header, the exact size
and every label before a tensor is built, and the adapter checks the images' shape against the
task's before training or scoring on them.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from syncline.errors import SpecError
from syncline.protocol.spec import TrainingTaskSpec

FAMILIES = ("vit",)
"""``model.family`` values a vision task may use: ``transformers``' ViT for image classification."""
SHARD_MAGIC = b"SYNCIMG1"
"""First 8 bytes of an image shard (encoding ``syncline-image-shard-v1``)."""
SHARD_HEADER = struct.Struct("<8sIHHHH")
"""magic, image count N (uint32), channels C, height H, width W, reserved (uint16 each, LE)."""
MAX_CHANNELS = 4
MAX_IMAGE_SIZE = 1024
MAX_LABELS = 1 << 16
"""Labels are uint16: at most 65 536 classes."""
MAX_CLASS_NAME_CHARS = 128
MAX_SHARD_IMAGES = 1 << 24
FROZEN_SUFFIX = "attention.k_proj.bias"
"""Parameters not trained (``requires_grad`` false, so not in the state), set to 0: the attention
key projections' biases. Adding ``b`` to every key adds ``q . b`` to all of a query's logits, which
the softmax cancels, so their gradient is exactly 0 and only rounding noise reaches them; AdamW
normalizes that noise into steps of about ``lr``, which differ between a bf16 trainer and an fp32
referee by more than the tolerance envelope (measured: the worst tensor of a 4-step segment, the
segment outside the envelope). Frozen at 0, they change nothing."""
METRIC_NAME = "top1_accuracy"
EXPORT_PROCESSOR_FILE = "preprocessor_config.json"
"""What :func:`write_export_files` adds to a ``save_pretrained`` directory (``AutoImageProcessor`` reads it)."""
EXPORT_VISION_FILE = "vision.json"
"""... and the task's image format in plain words (size, channels, pixel scaling, class names)."""


class ImageShardError(ValueError):
    """An image shard's bytes do not decode (one line)."""


@dataclass(frozen=True)
class ImageShard:
    """Decoded image shard: ``images`` uint8 ``[N, C, H, W]`` and ``labels`` int64 ``[N]``."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def encode_image_shard(images: np.ndarray, labels: np.ndarray) -> bytes:
    """An image shard (``syncline-image-shard-v1``) of ``images`` (uint8 ``[N, C, H, W]``) and
    ``labels`` (``N`` integers in ``[0, 65536)``)."""
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ImageShardError(f"images must be uint8 [N, C, H, W], got {images.dtype} {list(images.shape)}")
    n, c, h, w = (int(d) for d in images.shape)
    _check_header(n, c, h, w)
    if labels.shape != (n,) or labels.dtype.kind not in "iu":
        raise ImageShardError(f"labels must be {n} integers, got {labels.dtype} {list(labels.shape)}")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= MAX_LABELS):
        raise ImageShardError(f"labels must lie in [0, {MAX_LABELS})")
    header = SHARD_HEADER.pack(SHARD_MAGIC, n, c, h, w, 0)
    return header + np.ascontiguousarray(images).tobytes() + labels.astype("<u2").tobytes()


def _check_header(n: int, c: int, h: int, w: int) -> None:
    if not 1 <= n <= MAX_SHARD_IMAGES:
        raise ImageShardError(f"an image shard holds 1 to {MAX_SHARD_IMAGES} images, not {n}")
    if not 1 <= c <= MAX_CHANNELS:
        raise ImageShardError(f"an image shard's images have 1 to {MAX_CHANNELS} channels, not {c}")
    if not (1 <= h <= MAX_IMAGE_SIZE and 1 <= w <= MAX_IMAGE_SIZE):
        raise ImageShardError(f"an image shard's images are 1 to {MAX_IMAGE_SIZE} pixels a side, not {h}x{w}")


def decode_image_shard(data: bytes, *, num_labels: int = MAX_LABELS) -> ImageShard:
    """Parse an image shard, refusing anything but the exact encoding: the magic, a zero reserved
    field, bounded dimensions, exactly ``20 + N * (C * H * W + 2)`` bytes and labels below
    ``num_labels``."""
    if len(data) < SHARD_HEADER.size:
        raise ImageShardError(f"an image shard starts with a {SHARD_HEADER.size}-byte header; got {len(data)} bytes")
    magic, n, c, h, w, reserved = SHARD_HEADER.unpack_from(data)
    if magic != SHARD_MAGIC:
        raise ImageShardError(f"not an image shard: it starts with {magic!r}, not {SHARD_MAGIC!r}")
    if reserved != 0:
        raise ImageShardError(f"image shard header: reserved field is {reserved}, not 0")
    _check_header(n, c, h, w)
    pixels = n * c * h * w
    expected = SHARD_HEADER.size + pixels + 2 * n
    if len(data) != expected:
        raise ImageShardError(
            f"an image shard of {n} images {c}x{h}x{w} is {expected} bytes, this one is {len(data)} bytes"
        )
    images = np.frombuffer(data, dtype=np.uint8, count=pixels, offset=SHARD_HEADER.size).reshape(n, c, h, w)
    labels = np.frombuffer(data, dtype="<u2", count=n, offset=SHARD_HEADER.size + pixels).astype(np.int64)
    if int(labels.max()) >= num_labels:
        raise ImageShardError(f"image shard label {int(labels.max())} is not below num_labels={num_labels}")
    return ImageShard(torch.from_numpy(images.copy()), torch.from_numpy(labels))


def pixel_table(mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """float32 ``[C, 256]``: entry ``[c, p]`` is ``((p / 255) - mean[c]) / std[c]`` in float64
    (each operation rounded as IEEE binary64 does), rounded to float32 once."""
    m = np.asarray(mean, dtype=np.float64)[:, None]
    s = np.asarray(std, dtype=np.float64)[:, None]
    table = ((np.arange(256, dtype=np.float64)[None, :] / 255.0) - m) / s
    return torch.from_numpy(table.astype(np.float32))


def vit_config(config: Mapping[str, Any], *, image_size: int, num_channels: int, num_labels: int) -> Any:
    """The ``transformers`` ``ViTConfig`` of a spec's model (``{family, **architecture}``): the image
    size, channels and labels are the task's (filled in when absent; a value that disagrees is a
    ``SpecError``), the image size a multiple of the patch size."""
    from transformers import AutoConfig

    cfg = dict(config)
    family = str(cfg.pop("family", cfg.pop("model_type", "vit")))
    if family not in FAMILIES:
        raise SpecError(f"model family {family!r} is not a vision family these agents build ({', '.join(FAMILIES)})")
    task = {"image_size": image_size, "num_channels": num_channels, "num_labels": num_labels}
    for key, value in task.items():
        given = cfg.setdefault(key, value)
        if given != value:
            raise SpecError(f"model.config.{key} {given!r} disagrees with metadata.{key} {value}")
    patch = cfg.get("patch_size", 16)
    if not isinstance(patch, int) or isinstance(patch, bool) or patch < 1 or image_size % patch:
        raise SpecError(f"model.config.patch_size {patch!r} must be a positive divisor of image_size {image_size}")
    for key in ("id2label", "label2id", "problem_type"):
        if key in cfg:
            raise SpecError(f"model.config.{key}: a vision task's labels are metadata.class_names; leave it out")
    try:
        return AutoConfig.for_model(family, **cfg)
    except (ValueError, TypeError, KeyError) as exc:
        raise SpecError(f"model config of family {family!r} is invalid: {' '.join(str(exc).split())[:300]}") from None


class VisionAdapter:
    """Image classification with a ``transformers`` ViT (``ViTForImageClassification``).

    Batches are ``{"pixel_values": float32 [B, C, H, W], "labels": int64 [B]}``: ``B`` images drawn
    uniformly with replacement from the concatenated shards by a generator seeded with ``seed``.
    The attention key biases are frozen at 0 (:data:`FROZEN_SUFFIX`); every other parameter is trained.
    """

    name = "vision"
    metric_name = METRIC_NAME
    metric_higher_is_better = True

    def __init__(
        self,
        *,
        image_size: int,
        num_channels: int,
        num_labels: int,
        pixel_mean: Sequence[float],
        pixel_std: Sequence[float],
        class_names: Sequence[str] | None = None,
    ):
        _check_int("image_size", image_size, 1, MAX_IMAGE_SIZE)
        _check_int("num_channels", num_channels, 1, MAX_CHANNELS)
        _check_int("num_labels", num_labels, 2, MAX_LABELS)
        self.image_size = image_size
        self.num_channels = num_channels
        self.num_labels = num_labels
        self.pixel_mean = _channel_floats("pixel_mean", pixel_mean, num_channels)
        self.pixel_std = _channel_floats("pixel_std", pixel_std, num_channels)
        if any(s <= 0 for s in self.pixel_std):
            raise SpecError("metadata.pixel_std: every channel's std must be positive")
        if class_names is not None and (isinstance(class_names, str) or not isinstance(class_names, Sequence)):
            raise SpecError("metadata.class_names must be a list of names")
        names = [str(i) for i in range(num_labels)] if class_names is None else list(class_names)
        if (
            len(names) != num_labels
            or len(set(names)) != len(names)
            or not all(isinstance(n, str) and 0 < len(n) <= MAX_CLASS_NAME_CHARS for n in names)
        ):
            raise SpecError(
                f"metadata.class_names must be {num_labels} distinct names of 1 to {MAX_CLASS_NAME_CHARS} characters"
            )
        self.class_names = tuple(names)
        self._table = pixel_table(self.pixel_mean, self.pixel_std).reshape(-1)
        self._channel_offsets = (torch.arange(num_channels) * 256).view(1, num_channels, 1, 1)

    # ------------------------------------------------------------------ data

    def decode(self, shard: bytes) -> ImageShard:
        """A shard of this task's images (shape and labels checked); a one-line ``ValueError`` otherwise."""
        decoded = decode_image_shard(shard, num_labels=self.num_labels)
        shape = tuple(decoded.images.shape[1:])
        want = (self.num_channels, self.image_size, self.image_size)
        if shape != want:
            raise ImageShardError(f"image shard holds {list(shape)} images; the task's are {list(want)} (C, H, W)")
        return decoded

    def pixel_values(self, images: torch.Tensor) -> torch.Tensor:
        """float32 ``[N, C, H, W]`` model inputs of uint8 ``images`` (the spec's pixel scaling)."""
        return self._table[images.long() + self._channel_offsets]

    # ------------------------------------------------------------------ ModalityAdapter

    def build_model(self, config: Mapping[str, Any], *, seed: int) -> torch.nn.Module:
        from transformers import AutoModelForImageClassification

        hf_config = vit_config(
            config, image_size=self.image_size, num_channels=self.num_channels, num_labels=self.num_labels
        )
        torch.manual_seed(seed)
        model: torch.nn.Module = AutoModelForImageClassification.from_config(hf_config)  # type: ignore[no-untyped-call]
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(FROZEN_SUFFIX):
                    p.zero_()
                    p.requires_grad_(False)
        return model

    def batches(
        self, shards: Sequence[bytes], *, batch_size: int, seed: int, steps: int
    ) -> Iterator[dict[str, torch.Tensor]]:
        parts = [self.decode(s) for s in shards]
        if not parts:
            raise ValueError("no image shards assigned")
        images = torch.cat([p.images for p in parts])
        labels = torch.cat([p.labels for p in parts])
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            pick = torch.randint(0, len(labels), (batch_size,), generator=gen)
            yield {"pixel_values": self.pixel_values(images[pick]), "labels": labels[pick]}

    def loss(self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        logits = model(pixel_values=batch["pixel_values"]).logits
        return torch.nn.functional.cross_entropy(logits.float(), batch["labels"])

    def evaluate(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """Mean cross-entropy over :meth:`scored` examples of the validation shard."""
        loss_sum, _, count = self.scores(model, shard, batch_size=batch_size, max_batches=max_batches)
        return loss_sum / count

    def metric(self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int) -> float:
        """Top-1 accuracy (a fraction in ``[0, 1]``) over the same examples as :meth:`evaluate`;
        the predicted class is the first index of the largest logit."""
        _, correct, count = self.scores(model, shard, batch_size=batch_size, max_batches=max_batches)
        return correct / count

    @torch.no_grad()
    def scores(
        self, model: torch.nn.Module, shard: bytes, *, batch_size: int, max_batches: int
    ) -> tuple[float, int, int]:
        """``(summed cross-entropy, correct predictions, examples)`` over the validation shard's
        examples in order, all of them or ``batch_size * max_batches`` evenly spaced ones
        (``linspace(0, N - 1, wanted).round()``), scored in batches of ``batch_size``."""
        if batch_size < 1 or max_batches < 1:
            raise ValueError("batch_size and max_batches must be positive")
        data = self.decode(shard)
        wanted = min(len(data), batch_size * max_batches)
        pick = torch.linspace(0, len(data) - 1, wanted).round().long()
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        loss_sum, correct = 0.0, 0
        try:
            for i in range(0, wanted, batch_size):
                chosen = pick[i : i + batch_size]
                labels = data.labels[chosen].to(device)
                logits = model(pixel_values=self.pixel_values(data.images[chosen]).to(device)).logits.float()
                loss_sum += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
                correct += int((logits.argmax(dim=-1) == labels).sum())
        finally:
            model.train(was_training)
        return loss_sum, correct, wanted

    # ------------------------------------------------------------------ export

    def processor_config(self) -> dict[str, Any]:
        """``preprocessor_config.json`` for ``AutoImageProcessor`` (a ``ViTImageProcessor``): resize to
        the task's size, rescale by 1/255, normalize with the task's mean and std."""
        return {
            "image_processor_type": "ViTImageProcessor",
            "do_resize": True,
            "size": {"height": self.image_size, "width": self.image_size},
            "resample": 2,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "image_mean": list(self.pixel_mean),
            "image_std": list(self.pixel_std),
            "do_convert_rgb": self.num_channels == 3,
        }

    def export_summary(self) -> dict[str, Any]:
        """What a user needs to feed the exported model: the input shape, the pixel scaling and the
        class of each output index."""
        return {
            "image_size": self.image_size,
            "num_channels": self.num_channels,
            "input": "pixel_values float32 [batch, num_channels, image_size, image_size]",
            "pixel_scaling": "((p / 255) - pixel_mean[c]) / pixel_std[c] for a uint8 pixel p of channel c",
            "pixel_mean": list(self.pixel_mean),
            "pixel_std": list(self.pixel_std),
            "class_names": list(self.class_names),
            "metric": METRIC_NAME,
        }


def _check_int(key: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise SpecError(f"metadata.{key} must be an integer from {low} to {high}, got {value!r}")


def _channel_floats(key: str, values: object, channels: int) -> tuple[float, ...]:
    if not isinstance(values, Sequence) or isinstance(values, str) or len(values) != channels:
        raise SpecError(f"metadata.{key} must be a list of {channels} numbers (one per channel)")
    out: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)):
            raise SpecError(f"metadata.{key} must hold finite numbers, got {v!r}")
        out.append(float(v))
    return tuple(out)


def adapter_from_spec(spec: TrainingTaskSpec) -> VisionAdapter:
    """The vision adapter of a task (``metadata``: ``image_size``, ``num_channels``, ``num_labels``,
    ``pixel_mean``, ``pixel_std``, optional ``class_names``); the model's config is checked against
    them too. A one-line ``SpecError`` for anything missing or malformed."""
    meta = dict(spec.metadata)
    missing = [k for k in ("image_size", "num_channels", "num_labels", "pixel_mean", "pixel_std") if k not in meta]
    if missing:
        raise SpecError(f"a vision task's metadata needs {', '.join(missing)}")
    adapter = VisionAdapter(
        image_size=meta["image_size"],
        num_channels=meta["num_channels"],
        num_labels=meta["num_labels"],
        pixel_mean=meta["pixel_mean"],
        pixel_std=meta["pixel_std"],
        class_names=meta.get("class_names"),
    )
    vit_config(
        {"family": spec.model.family, **dict(spec.model.config)},
        image_size=adapter.image_size,
        num_channels=adapter.num_channels,
        num_labels=adapter.num_labels,
    )
    return adapter


def write_export_files(out_dir: Path, spec: TrainingTaskSpec) -> None:
    """Complete a ``save_pretrained`` directory of a vision task's model: the class names as the
    config's ``id2label``/``label2id`` (``config.json`` rewritten), ``preprocessor_config.json``
    (what ``AutoImageProcessor.from_pretrained`` reads: size, rescale, mean and std) and
    ``vision.json`` (:meth:`VisionAdapter.export_summary`)."""
    adapter = adapter_from_spec(spec)
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["id2label"] = {str(i): name for i, name in enumerate(adapter.class_names)}
    config["label2id"] = {name: i for i, name in enumerate(adapter.class_names)}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    processor = json.dumps(adapter.processor_config(), indent=2, sort_keys=True) + "\n"
    (out_dir / EXPORT_PROCESSOR_FILE).write_text(processor, encoding="utf-8")
    summary = json.dumps(adapter.export_summary(), indent=2) + "\n"
    (out_dir / EXPORT_VISION_FILE).write_text(summary, encoding="utf-8")
