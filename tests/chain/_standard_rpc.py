"""A real JSON-RPC proxy on 127.0.0.1 that offers only the standard Ethereum methods.

It forwards ``eth_*``, ``net_*`` and ``web3_*`` calls to an upstream node (anvil) and answers
every other method (``evm_*``, ``anvil_*``, ``hardhat_*``, ``debug_*`` ...) with JSON-RPC error
``-32601 method not found``, as a public node or a testnet gateway does. Agents that reach the
chain only through it cannot time-travel, mine on demand or snapshot: any such call fails.
Refused method names are recorded in ``refused``.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STANDARD_PREFIXES = ("eth_", "net_", "web3_")
MAX_BODY = 8 * 1024 * 1024


class StandardRpcProxy:
    """``with StandardRpcProxy(upstream) as proxy: proxy.url`` serves until the block ends."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.refused: list[str] = []
        self.forwarded: list[str] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 < length <= MAX_BODY:
                    self.send_error(413)
                    return
                body = json.loads(self.rfile.read(length))
                if isinstance(body, list):
                    answer: Any = [proxy.handle(call) for call in body]
                else:
                    answer = proxy.handle(body)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def handle(self, call: dict[str, Any]) -> dict[str, Any]:
        method = str(call.get("method", ""))
        if not method.startswith(STANDARD_PREFIXES):
            with self._lock:
                self.refused.append(method)
            return {
                "jsonrpc": "2.0",
                "id": call.get("id"),
                "error": {"code": -32601, "message": f"the method {method} does not exist/is not available"},
            }
        with self._lock:
            self.forwarded.append(method)
        request = urllib.request.Request(
            self.upstream, data=json.dumps(call).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def __enter__(self) -> StandardRpcProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
