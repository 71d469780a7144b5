"""``OriginGuard``: every state-changing request (any method but GET and HEAD) must come from this
server's own origin, or from a client that is no browser page.

* ``Host`` must name this server: ``127.0.0.1``, ``localhost`` or ``[::1]`` with the port it listens
  on, the host it was bound to, or an entry of ``--allowed-host`` / ``$SYNCLINE_API_ALLOWED_HOSTS``
  (``host`` or ``host:port``, comma-separated). Anything else is 421: a DNS-rebinding page (its
  own name resolving to 127.0.0.1) reaches the socket but names its own host.
* ``Origin``, when sent, must be ``http(s)://`` one of those hosts (403 otherwise), and a browser's
  ``Sec-Fetch-Site: cross-site`` is 403 too: a page elsewhere cannot post here (CSRF).
* Without ``Origin`` a request whose body is a CORS "simple" type (``text/plain``, a form) is 403:
  only a browser sends those without a preflight. Scripts and the CLI send JSON, or no body.

GET stays open (the read API and the web UI); the UI's own POSTs carry its same-origin ``Origin``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from syncline.api.middleware import send_error

ALLOWED_HOSTS_ENV = "SYNCLINE_API_ALLOWED_HOSTS"
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})


def configured_hosts(flag: Iterable[str] = ()) -> tuple[str, ...]:
    """``--allowed-host`` values plus ``$SYNCLINE_API_ALLOWED_HOSTS`` (comma-separated), lowercased."""
    values = [*flag, *os.environ.get(ALLOWED_HOSTS_ENV, "").split(",")]
    return tuple(v.strip().lower() for v in values if v.strip())


def _with_port(host: str, port: int) -> set[str]:
    out = {host}
    if ":" not in host.strip("[]") or host.startswith("["):
        out.add(f"{host}:{port}")
    return out


class OriginGuard:
    """ASGI middleware enforcing the rules above; ``bind_host`` is the address the server listens on
    and ``extra`` the configured host allow-list."""

    def __init__(self, app: ASGIApp, *, bind_host: str = "127.0.0.1", extra: Iterable[str] = ()):
        self.app = app
        self.bind_host = bind_host.lower()
        self.extra = tuple(extra)

    def allowed(self, port: int) -> set[str]:
        hosts: set[str] = set()
        for h in LOOPBACK:
            hosts.add(f"{h}:{port}")
        if self.bind_host not in WILDCARDS:
            bound = f"[{self.bind_host}]" if ":" in self.bind_host else self.bind_host
            hosts.add(f"{bound}:{port}")
        for entry in self.extra:
            hosts |= _with_port(entry, port)
        return hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        server = scope.get("server") or ("127.0.0.1", 80)
        allowed = self.allowed(int(server[1] or 80))
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(key.lower(), value)
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        if host not in allowed:
            await send_error(send, 421, f"Host {host[:80]!r} is not this server: add it with --allowed-host")
            return
        origin = headers.get(b"origin")
        if headers.get(b"sec-fetch-site", b"").lower() == b"cross-site":
            await send_error(send, 403, "a cross-site request cannot change state here")
            return
        if origin is not None:
            text = origin.decode("latin-1").strip().lower()
            parts = urlsplit(text)
            if parts.scheme not in ("http", "https") or parts.netloc not in allowed or parts.path not in ("", "/"):
                await send_error(send, 403, f"Origin {text[:80]!r} may not change state on this server")
                return
        else:
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            if ctype in SIMPLE_TYPES:
                await send_error(send, 403, f"a {ctype} request without Origin may not change state (send JSON)")
                return
        await self.app(scope, receive, send)
