"""Errors that carry a one-line, actionable message for the CLI and the API."""

from __future__ import annotations


class SynclineError(Exception):
    """Base class: ``str(err)`` is a complete one-line explanation for the user."""


class TrainedNothing(SynclineError):
    """A run ended with no round having accepted any work: its model is the initial one."""


class SpecError(SynclineError):
    """A task spec is malformed or violates a rule the contract enforces."""


class ToolchainError(SynclineError):
    """A required tool (node, anvil, solc wrapper) is missing or failed."""


class ChainError(SynclineError):
    """A chain call failed; for contract reverts the message names the custom error and its values."""

    def __init__(self, message: str, *, error_name: str | None = None, args: dict[str, object] | None = None):
        super().__init__(message)
        self.error_name = error_name
        self.error_args = args or {}


class KeyConfigError(SynclineError):
    """No usable signing key was configured."""


FATAL_EXCEPTIONS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, MemoryError, GeneratorExit)
"""What a candidate's failure never hides: the process is stopping or out of memory."""


def candidate_failure(exc: BaseException) -> str:
    """The one-line reason a candidate (blob, record, payload: bytes from the network or the
    chain) was rejected, for code that tries candidates in turn.

    Any exception raised while decoding or checking one candidate makes that candidate bad, never
    the caller's step: parsers should raise their module's own error, but a type confusion they
    missed (``TypeError``, ``KeyError``, ``AttributeError``, ``OverflowError``, ...) must not
    stall an agent either. Re-raises :data:`FATAL_EXCEPTIONS` (interrupts, exit, memory)."""
    if isinstance(exc, FATAL_EXCEPTIONS):
        raise exc
    text = (str(exc).splitlines() or [""])[0][:160]
    if isinstance(exc, SynclineError | ValueError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
