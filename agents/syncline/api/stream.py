"""``GET /api/stream``: server-sent events, one ``update`` each time the indexer advances."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request

KEEPALIVE_S = 15.0
CHECK_S = 0.25


def update_event(indexed_block: int) -> str:
    return f"event: update\ndata: {json.dumps({'indexed_block': indexed_block})}\n\n"


async def updates(
    request: Request,
    indexed_block: Callable[[], int],
    stopping: Callable[[], bool],
    keepalive_s: float = KEEPALIVE_S,
) -> AsyncIterator[str]:
    """Yields an ``update`` now and whenever ``indexed_block()`` changes, a comment every
    ``keepalive_s``; ends when the client disconnects or the server stops."""
    last = indexed_block()
    yield "retry: 2000\n\n" + update_event(last)
    quiet_since = time.monotonic()
    while not stopping():
        if await request.is_disconnected():
            return
        current = indexed_block()
        if current != last:
            last = current
            quiet_since = time.monotonic()
            yield update_event(current)
        elif time.monotonic() - quiet_since >= keepalive_s:
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
        await asyncio.sleep(CHECK_S)
