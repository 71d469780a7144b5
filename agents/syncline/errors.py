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
