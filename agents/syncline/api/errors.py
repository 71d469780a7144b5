"""Every error the API answers is one JSON line: ``{"error": "<one line>", "status": <code>}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from syncline.blobstore import BlobNotFound, BlobStoreError
from syncline.errors import ChainError, SpecError, SynclineError
from syncline.observability import get_logger

log = get_logger("syncline.api")

MAX_MESSAGE = 300


class ApiError(Exception):
    """An expected failure with its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": one_line(message) or f"HTTP {status}", "status": status}, status_code=status)


def _union_member(part: object) -> bool:
    """A location part pydantic adds for the member of a union that failed (``ModelParams``,
    ``function-after[_heads(), ModelParams]``): not a field the client wrote."""
    return isinstance(part, str) and ("[" in part or part[:1].isupper())


def validation_message(errors: Sequence[Any]) -> str:
    """The first validation error as ``field.path: message`` (the ``body``/``path`` prefix dropped)."""
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "path", "query") and not _union_member(p)]
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON: {msg}"
    if first.get("type") == "missing" and loc:
        return f"{'.'.join(loc)}: required field missing"
    return f"{'.'.join(loc)}: {msg}" if loc else msg


def status_of(exc: Exception) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, SpecError):
        return 422
    if isinstance(exc, BlobNotFound):
        return 404
    if isinstance(exc, BlobStoreError | ChainError):
        return 502
    if isinstance(exc, SynclineError):
        return 400
    return 500


def install_error_handlers(app: FastAPI) -> None:
    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no such endpoint: {request.method} {request.url.path}"
        if exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
        return error_response(exc.status_code, detail)

    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, validation_message(exc.errors()))

    async def known_error(request: Request, exc: Exception) -> JSONResponse:
        status = status_of(exc)
        message = exc.message if isinstance(exc, ApiError) else str(exc)
        if status >= 500:
            log.warning("api.upstream_error", path=request.url.path, error=one_line(message))
        return error_response(status, message)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("api.unexpected_error", path=request.url.path, error=f"{type(exc).__name__}: {one_line(str(exc))}")
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(ApiError, known_error)
    app.add_exception_handler(SynclineError, known_error)
    app.add_exception_handler(Exception, unexpected)
