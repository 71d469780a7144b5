"""The DiLoCo inner loop: H AdamW steps from the round's state; the outer gradient is
``theta_start - theta_end`` (flattened in the canonical layout). The AdamW state persists across
rounds, as in DiLoCo.

For training-fraud proofs the loop can capture a checkpoint (weights, AdamW moments and step
counts, the CPU generator state; see :mod:`syncline.protocol.checkpoints`) before step 0 and after
every ``checkpoint_interval`` steps, and can re-run one segment from a checkpoint
(:meth:`InnerLoop.run_segment`). Capturing only reads the model and the optimizer, so a run with
checkpoints trains exactly like one without.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import islice
from pathlib import Path

import torch
from tqdm import tqdm

from syncline.modality.base import ModalityAdapter
from syncline.modality.lora import trained_parameters
from syncline.privacy.dpsgd import DpSgd, PrivateStep, StepNoise
from syncline.protocol.checkpoints import (
    Checkpoint,
    CheckpointError,
    CheckpointLike,
    InnerHyperparameters,
    checkpoint_header,
    checkpoint_steps,
)
from syncline.protocol.layout import ParameterEntry, ParameterLayout, torch_dtype
from syncline.protocol.state import TrainingState
from syncline.run.agent_config import InnerOptimizerConfig
from syncline.run.context import flat_parameters, load_weights
from syncline.run.state_file import StateFile

CheckpointWriter = Callable[[Callable[[bytes], object]], None]
SNAPSHOT_MAX_NUMEL = 1 << 24
"""Up to this many parameters (a 192 MiB copy) a checkpoint is copied and written in the
background (:meth:`InnerLoop.run`); above, it is streamed from the model while training waits."""
"""Writes one checkpoint's canonical bytes into the function it is given."""


@dataclass(frozen=True)
class RoundWork:
    """What one round of inner training produced.

    ``checkpoints`` holds the canonical bytes of checkpoints ``c_0 .. c_S`` when the run was asked
    to capture them, and is empty otherwise; with a ``checkpoint_sink`` they went to the sink and
    ``checkpoint_digests`` holds what it returned for each instead.
    """

    pseudo_gradient: torch.Tensor
    losses: tuple[float, ...]
    train_seconds: float
    tokens: int
    checkpoints: tuple[bytes, ...] = ()
    checkpoint_digests: tuple[str, ...] = ()
    checkpoint_seconds: float = 0.0  # capturing the checkpoints (not in train_seconds)
    # With ``wait_for_checkpoints=False``: the sink's calls still under way in the background,
    # in capture order (:meth:`checkpoints_written` waits for them).
    checkpoints_pending: tuple[Future[str], ...] = ()

    @property
    def mean_loss(self) -> float:
        return sum(self.losses) / len(self.losses) if self.losses else float("nan")

    def checkpoints_written(self) -> RoundWork:
        """This work once every checkpoint is in the sink: the pending digests are waited for and
        appended to ``checkpoint_digests`` (the time goes to ``checkpoint_seconds``)."""
        if not self.checkpoints_pending:
            return self
        began = time.perf_counter()
        digests = tuple(f.result() for f in self.checkpoints_pending)
        return replace(
            self,
            checkpoint_digests=self.checkpoint_digests + digests,
            checkpoint_seconds=self.checkpoint_seconds + time.perf_counter() - began,
            checkpoints_pending=(),
        )


@contextlib.contextmanager
def replay_environment(threads: int) -> Iterator[None]:
    """Run with ``threads`` torch intra-op threads; restore the caller's threads and CPU RNG after."""
    before_threads = torch.get_num_threads()
    before_rng = torch.get_rng_state()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before_threads)
        torch.set_rng_state(before_rng)


def _step_count(value: object) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        count = float(value.item())
    elif isinstance(value, int | float):
        count = float(value)
    else:
        raise CheckpointError(f"AdamW step count {value!r} is not a number")
    if count != int(count) or count < 0:
        raise CheckpointError(f"AdamW step count {count} is not a non-negative integer")
    return int(count)


CUBLAS_WORKSPACE = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` for deterministic cuBLAS; it must be set before cuBLAS starts."""


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """Deterministic mode inside (``torch.use_deterministic_algorithms`` and cuDNN's flag), the
    caller's mode after. The checkpoints taken inside declare it (see :meth:`InnerLoop.checkpoint`)."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.deterministic
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn


class InnerLoop:
    """Owns the model replica and the inner optimizer of one trainer."""

    def __init__(
        self,
        adapter: ModalityAdapter,
        model: torch.nn.Module,
        layout: ParameterLayout,
        cfg: InnerOptimizerConfig,
        *,
        device: str = "cpu",
        dtype: str = "fp32",
        gradient_checkpointing: bool = False,
        deterministic: bool = False,
        privacy: DpSgd | None = None,
    ):
        self.adapter = adapter
        self.layout = layout
        self.cfg = cfg
        self.batch_size = cfg.batch_size
        self.device = torch.device(device)
        self.dtype = dtype
        # CPU torch is deterministic already; on CUDA the mode needs cuBLAS's workspace setting
        # before cuBLAS first runs, so it is fixed for the process here.
        self.deterministic = deterministic and self.device.type == "cuda"
        if self.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        self.model = model.to(self.device)
        enable_checkpointing = getattr(self.model, "gradient_checkpointing_enable", None)
        if gradient_checkpointing and callable(enable_checkpointing):
            enable_checkpointing()
        self.model.train()
        self.optimizer = torch.optim.AdamW(
            list(trained_parameters(self.model).values()),  # a LoRA model's adapters only
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            weight_decay=cfg.weight_decay,
        )
        # DP-SGD (docs/privacy.md): per-example clipping and seeded Gaussian noise through Opacus.
        self.private = PrivateStep(self.model, self.optimizer, privacy, batch_size=self.batch_size) if privacy else None

    def _mode(self) -> contextlib.AbstractContextManager[None]:
        """Deterministic mode around training when this loop runs in it (CUDA only)."""
        return deterministic_algorithms(True) if self.deterministic else contextlib.nullcontext()

    def _autocast(self) -> contextlib.AbstractContextManager[object]:
        if self.dtype == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _step(self, batch: dict[str, torch.Tensor], step: int = 0, noise: StepNoise | None = None) -> tuple[float, int]:
        """One AdamW step on ``batch`` (a DP-SGD step, with the noise seeded for inner step
        ``step`` by ``noise``, when the loop is private); returns (loss, tokens): a language
        batch's tokens, another modality's examples (images, forecast windows)."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self._autocast():
            loss = self.adapter.loss(self.model if self.private is None else self.private.module, batch)
        if self.private is not None:
            if noise is None:
                raise CheckpointError("a differentially private inner loop needs the round's noise seeds")
            self.private.step(loss, noise.step_seed(step))
        else:
            loss.backward()  # type: ignore[no-untyped-call]
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        size = int(batch["input_ids"].numel()) if "input_ids" in batch else len(next(iter(batch.values())))
        return float(loss.detach()), size

    def run(
        self,
        state: TrainingState | StateFile,
        shards: Sequence[bytes],
        *,
        seed: int,
        progress: bool = False,
        checkpoint_interval: int | None = None,
        train_steps: int | None = None,
        between_steps: Callable[[], None] | None = None,
        checkpoint_sink: Callable[[int, CheckpointWriter], str] | None = None,
        wait_for_checkpoints: bool = True,
        noise: StepNoise | None = None,
    ) -> RoundWork:
        """H inner steps from ``state`` on ``shards``; batches are reproducible from ``seed``.

        Parameters
        ----------
        checkpoint_interval
            Capture checkpoints ``c_0 .. c_S`` (before step 0 and every ``checkpoint_interval``
            steps, and after the last step) into ``RoundWork.checkpoints``. None: capture nothing.
        train_steps
            TESTS AND DEMOS ONLY (the ``lazy`` misbehaviour): train only the first
            ``train_steps`` steps; the checkpoints due after that repeat the last real state under
            the step numbers an honest run would have reached.
        between_steps
            Called after every step (the agent's own duties while it trains: it must not touch
            the model, the optimizer or torch's generator); its time is not training time.
        checkpoint_sink
            Called with ``(index, write)`` for each captured checkpoint instead of keeping its
            bytes: ``write(out)`` streams the checkpoint's canonical bytes into ``out`` one
            parameter at a time (:meth:`write_checkpoint`: no flat copy of the weights or moments);
            its return values (digests) go to ``RoundWork.checkpoint_digests``. Up to
            :data:`SNAPSHOT_MAX_NUMEL` parameters the checkpoint is copied instead and the sink
            is called from a background thread while the next steps train (in capture order).
        wait_for_checkpoints
            False: return without waiting for the background sink calls still under way (the
            last checkpoint's, typically); they are in ``RoundWork.checkpoints_pending`` and
            :meth:`RoundWork.checkpoints_written` waits for them, so the caller can do other
            work (encode the payload) meanwhile.
        noise
            A private loop's noise seeds (:class:`syncline.privacy.noise.RoundNoise`); required
            then, ignored otherwise.
        """
        load_weights(self.model, state)
        start = flat_parameters(self.model, self.layout)
        losses: list[float] = []
        tokens = 0
        steps = self.cfg.inner_steps
        marks = checkpoint_steps(steps, checkpoint_interval) if checkpoint_interval is not None else ()
        todo = steps if train_steps is None else max(0, min(train_steps, steps))
        captured: list[bytes | str | Future[str]] = []
        excluded_seconds = capture_seconds = 0.0
        # A small model's checkpoint is copied (12 B/param) and written and hashed in the
        # background while training goes on; a large one is streamed from the model at once.
        writer = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
            if checkpoint_sink is not None and self.layout.numel <= SNAPSHOT_MAX_NUMEL
            else None
        )

        def capture(step: int) -> None:
            nonlocal excluded_seconds, capture_seconds
            t0 = time.perf_counter()
            if checkpoint_sink is None:
                captured.append(self.checkpoint(step).to_bytes())
            elif writer is not None:
                snapshot = self.checkpoint(step)  # copies: the training may go on
                captured.append(writer.submit(checkpoint_sink, len(captured), snapshot.write))
            else:
                captured.append(checkpoint_sink(len(captured), functools.partial(self.write_checkpoint, step)))
            elapsed = time.perf_counter() - t0
            capture_seconds += elapsed
            excluded_seconds += elapsed

        began = time.perf_counter()
        try:
            with self._mode():
                if marks:
                    capture(0)
                batches = self.adapter.batches(shards, batch_size=self.batch_size, seed=seed, steps=steps)
                for i, batch in enumerate(
                    tqdm(islice(batches, todo), total=todo, disable=not progress, desc="inner steps", leave=False)
                ):
                    loss, n = self._step(batch, i, noise)
                    losses.append(loss)
                    tokens += n
                    if marks and marks[len(captured)] == i + 1:
                        capture(i + 1)
                    if between_steps is not None:
                        t0 = time.perf_counter()
                        between_steps()
                        excluded_seconds += time.perf_counter() - t0
                for step in marks[len(captured) :]:  # only a shortened (lazy) run gets here
                    capture(step)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
        except BaseException:
            if writer is not None:
                writer.shutdown(wait=True, cancel_futures=True)
            raise
        train_seconds = time.perf_counter() - began - excluded_seconds
        if writer is not None:  # the checkpoints still being written: not training time
            t0 = time.perf_counter()
            writer.shutdown(wait=wait_for_checkpoints)
            if wait_for_checkpoints:
                captured = [c.result() if isinstance(c, Future) else c for c in captured]
            capture_seconds += time.perf_counter() - t0
        gradient = start.sub_(flat_parameters(self.model, self.layout))  # start - end, in place
        if not torch.isfinite(gradient).all():
            for c in captured:  # the sink's calls end before the error leaves
                if isinstance(c, Future):
                    c.exception()
            raise FloatingPointError("inner training diverged: the outer gradient holds NaN/Inf")
        kept = tuple(c for c in captured if isinstance(c, bytes))
        digests = tuple(c for c in captured if isinstance(c, str))
        pending = tuple(c for c in captured if isinstance(c, Future))
        return RoundWork(gradient, tuple(losses), train_seconds, tokens, kept, digests, capture_seconds, pending)

    # ------------------------------------------------------------------ checkpoints

    @cached_property
    def layout_digest(self) -> bytes:
        return self.layout.digest()

    def hyperparameters(self) -> InnerHyperparameters:
        group = self.optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        return InnerHyperparameters(
            lr=float(group["lr"]),
            beta1=float(beta1),
            beta2=float(beta2),
            weight_decay=float(group["weight_decay"]),
            eps=float(group["eps"]),
            batch_size=self.batch_size,
        )

    def checkpoint(self, step: int) -> Checkpoint:
        """The loop's full state now, labelled as after ``step`` inner steps of the round."""
        named = trained_parameters(self.model)
        exp_avg: dict[str, torch.Tensor] = {}
        exp_avg_sq: dict[str, torch.Tensor] = {}
        counts: list[int] = []
        for e in self.layout.entries:
            state = self.optimizer.state.get(named[e.name])
            if state:
                exp_avg[e.name] = state["exp_avg"].detach().float().cpu()
                exp_avg_sq[e.name] = state["exp_avg_sq"].detach().float().cpu()
                counts.append(_step_count(state["step"]))
            else:  # no gradient yet: AdamW would start this parameter from zero moments
                exp_avg[e.name] = exp_avg_sq[e.name] = torch.zeros(e.shape, dtype=torch.float32)
                counts.append(0)
        return Checkpoint(
            step=step,
            layout_digest=self.layout_digest,
            params=flat_parameters(self.model, self.layout),
            exp_avg=self.layout.flatten(exp_avg),
            exp_avg_sq=self.layout.flatten(exp_avg_sq),
            adam_steps=tuple(counts),
            optimizer=self.hyperparameters(),
            dtype=self.dtype,
            threads=torch.get_num_threads(),
            rng_state=bytes(torch.get_rng_state().numpy().tobytes()),
            device=self.device.type,
            deterministic=self.device.type == "cpu" or torch.are_deterministic_algorithms_enabled(),
        )

    def write_checkpoint(self, step: int, out: Callable[[bytes], object]) -> None:
        """Stream ``self.checkpoint(step).to_bytes()`` into ``out``, one parameter at a time: the
        same bytes without the three flat float32 copies (12 bytes per parameter) a
        :class:`Checkpoint` holds."""
        named = trained_parameters(self.model)
        entries = self.layout.entries
        states = [self.optimizer.state.get(named[e.name]) for e in entries]
        rng_state = bytes(torch.get_rng_state().numpy().tobytes())
        out(
            checkpoint_header(
                step=step,
                layout_digest=self.layout_digest,
                numel=self.layout.numel,
                adam_steps=tuple(_step_count(st["step"]) if st else 0 for st in states),
                optimizer=self.hyperparameters(),
                dtype=self.dtype,
                threads=torch.get_num_threads(),
                rng_bytes=len(rng_state),
                device=self.device.type,
                deterministic=self.device.type == "cpu" or torch.are_deterministic_algorithms_enabled(),
            )
        )
        for key in ("param", "exp_avg", "exp_avg_sq"):
            for e, st in zip(entries, states, strict=True):
                t = named[e.name] if key == "param" else (st[key] if st else None)
                if t is None:  # no gradient yet: zero moments, as checkpoint() records them
                    out(bytes(4 * e.numel))
                else:
                    out(t.detach().float().cpu().reshape(-1).numpy().astype("<f4", copy=False).tobytes())
        out(rng_state)

    def restore(self, ckpt: CheckpointLike) -> None:
        """Put the model, the optimizer (moments, step counts, coefficients), the batch size, the
        autocast dtype and the CPU generator exactly in the state ``ckpt`` records (a checkpoint
        in a file is read one parameter at a time)."""
        ckpt.check_layout(self.layout)
        named = trained_parameters(self.model)

        def entry(vector: str, e: ParameterEntry) -> torch.Tensor:  # as ParameterLayout.unflatten gives it
            flat = ckpt.values(vector, e.offset, e.offset + e.numel)
            return flat.reshape(e.shape).to(torch_dtype(e.dtype)).clone()

        with torch.no_grad():
            for e in self.layout.entries:
                named[e.name].copy_(entry("params", e))
        self.optimizer.state.clear()
        step_dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
        for e, count in zip(self.layout.entries, ckpt.adam_steps, strict=True):
            if count == 0:
                continue  # AdamW initializes it lazily, exactly as in a fresh optimizer
            p = named[e.name]
            self.optimizer.state[p] = {
                "step": torch.tensor(float(count), dtype=step_dtype),  # as AdamW creates it on CPU
                "exp_avg": entry("exp_avg", e).to(device=p.device, dtype=p.dtype),
                "exp_avg_sq": entry("exp_avg_sq", e).to(device=p.device, dtype=p.dtype),
            }
        hp = ckpt.optimizer
        for group in self.optimizer.param_groups:
            group.update(lr=hp.lr, betas=(hp.beta1, hp.beta2), weight_decay=hp.weight_decay, eps=hp.eps)
        self.batch_size = hp.batch_size
        self.dtype = ckpt.dtype
        if ckpt.rng_state:
            try:
                torch.set_rng_state(torch.frombuffer(bytearray(ckpt.rng_state), dtype=torch.uint8))
            except RuntimeError:
                raise CheckpointError("checkpoint rng_state is not a valid torch CPU generator state") from None

    def run_segment(
        self,
        ckpt: CheckpointLike,
        shards: Sequence[bytes],
        *,
        seed: int,
        start: int,
        stop: int,
        dtype: str | None = None,
        threads: int | None = None,
        noise: StepNoise | None = None,
        out: Callable[[bytes], object] | None = None,
    ) -> bytes:
        """Re-run steps ``[start, stop)`` of a round from ``ckpt`` (taken after ``start`` steps).

        The batches are those of the trainer's run: the first ``start`` batches of the round's
        seeded stream are skipped. Runs with the checkpoint's thread count and autocast dtype
        unless ``threads`` / ``dtype`` say otherwise (a referee replaying in its own precision),
        restores the caller's threads and CPU generator afterwards, and returns the canonical
        bytes of the checkpoint after step ``stop``; with ``out`` they are streamed into it one
        parameter at a time instead (:meth:`write_checkpoint`) and ``b""`` is returned. A private
        loop needs ``noise``: the seeds the trainer revealed for the segment
        (:class:`syncline.privacy.noise.SegmentNoise`).
        """
        steps = self.cfg.inner_steps
        if not 0 <= start < stop <= steps:
            raise CheckpointError(f"segment [{start}, {stop}) is not within the round's {steps} steps")
        if ckpt.step != start:
            raise CheckpointError(f"checkpoint is after step {ckpt.step}, the segment starts at step {start}")
        with replay_environment(ckpt.threads if threads is None else threads), self._mode():
            self.restore(ckpt)
            if dtype is not None:
                self.dtype = dtype
            batches = self.adapter.batches(shards, batch_size=self.batch_size, seed=seed, steps=steps)
            for i, batch in enumerate(islice(batches, start, stop), start=start):
                self._step(batch, i, noise)
            if out is not None:
                self.write_checkpoint(stop, out)
                return b""
            return self.checkpoint(stop).to_bytes()

    # ------------------------------------------------------------------ persistence (restart)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"optimizer": self.optimizer.state_dict()}, tmp)
        tmp.replace(path)

    def load(self, path: Path) -> bool:
        if not path.exists():
            return False
        data = torch.load(path, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(data["optimizer"])
        return True
