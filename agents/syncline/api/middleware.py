"""ASGI middleware: a request body size limit (413) and nesting limit (422), and per-route request metrics."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from syncline.api.metrics import ApiMetrics
from syncline.errors import SpecError
from syncline.protocol.spec import check_spec_strings
from syncline.protocol.wire import WireFormatError, check_bounded_json

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
MAX_BODY_DEPTH = 16
"""Deepest JSON request body accepted (the deepest, a task template, nests about five levels)."""


async def send_error(send: Send, status: int, message: str) -> None:
    """Answer ``{"error", "status"}`` as JSON from ASGI middleware (the API's error shape)."""
    body = json.dumps({"error": message, "status": status}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _text_problem(body: bytes) -> str | None:
    """Why a JSON request body's strings cannot be used (a NUL character or a lone surrogate, in
    any key or value), or None; bodies that are not JSON are left to the route."""
    if not body.strip():
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    try:
        check_spec_strings(value, "request body")
    except SpecError as exc:
        return str(exc)
    return None


class BodyLimit:
    """Reads a request body up to ``max_bytes`` (by ``Content-Length`` or while streaming) and
    answers 413 beyond it; the app then receives the buffered body."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        too_large = f"request body exceeds {self.max_bytes} bytes"
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await send_error(send, 413, too_large)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_error(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            check_bounded_json(body, max_bytes=self.max_bytes, max_depth=MAX_BODY_DEPTH, what="request body")
        except WireFormatError as exc:  # refused before FastAPI parses it (deep JSON overflows the C stack)
            await send_error(send, 422, str(exc))
            return
        problem = _text_problem(body)
        if problem is not None:  # a NUL or a lone surrogate reaches paths and hashes as a 500 otherwise
            await send_error(send, 422, problem)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class RequestMetrics:
    """Counts requests by route template (``/api/runs/{task_id}``), method and status."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.requests.labels(
                route=_route_of(scope), method=scope["method"], status=str(status["code"])
            ).inc()


def _route_of(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    return "static" if scope.get("path", "/").startswith("/") and not scope["path"].startswith("/api") else "unmatched"
