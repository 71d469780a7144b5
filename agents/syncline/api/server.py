"""``ApiServer``: the API app served by uvicorn in a background thread (the CLI, the demo and the
tests use it). ``start()`` returns the base URL once ``/healthz`` answers."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from types import TracebackType

import uvicorn

from syncline.api.app import create_app
from syncline.api.services import ApiServices
from syncline.api.settings import ApiSettings
from syncline.errors import SynclineError

__all__ = ["ApiServer", "ApiSettings"]

START_TIMEOUT_S = 60.0
GRACEFUL_SHUTDOWN_S = 3


class ApiServer:
    def __init__(self, settings: ApiSettings):
        self.settings = settings
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._services: ApiServices | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Build the app (``SynclineError`` on bad settings), bind, serve, wait for ``/healthz``."""
        app = create_app(self.settings)
        self._services = app.state.services
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.settings.host, self.settings.port))
        except OSError as exc:
            sock.close()
            self._services = None
            app.state.services.close()
            raise SynclineError(
                f"cannot listen on {self.settings.host}:{self.settings.port}: {exc.strerror or exc}"
            ) from None
        host, port = sock.getsockname()[:2]
        self._socket = sock
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="syncline-api", daemon=True
        )
        self._thread.start()
        self.url = f"http://{host}:{port}"
        self._wait_healthy(timeout_s)
        return self.url

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._thread is not None and not self._thread.is_alive():
                raise SynclineError("the API server exited while starting")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise SynclineError(f"the API server did not answer /healthz within {timeout_s:.0f} s")

    @property
    def services(self) -> ApiServices:
        if self._services is None:
            raise SynclineError("the API server is not running")
        return self._services

    def wait_indexed(self, timeout_s: float = 30.0) -> int:
        """Wait for an indexer pass that starts after this call (it sees every block mined before
        it), then for an enrichment pass after it; returns the indexed block."""
        if not self.services.indexer.wait_for_pass(timeout_s):
            raise SynclineError(f"the indexer did not complete a pass within {timeout_s:.0f} s")
        if not self.services.indexer.enricher.wait_for_pass(timeout_s):
            raise SynclineError(f"the enrichment worker did not complete a pass within {timeout_s:.0f} s")
        return self.services.indexer.indexed_block

    def stop(self) -> None:
        if self._server is not None:
            self.services.stopping.set()  # ends open event streams
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=GRACEFUL_SHUTDOWN_S + 10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None
        self._services = None

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
