"""``ApiSettings``: where the API finds the chain, the blob store, its database and the web UI."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from syncline.paths import repo_root, state_dir

DEFAULT_PORT = 8600
MAX_BODY_BYTES = 64 * 1024
DATA_DIR_ENV = "SYNCLINE_API_DATA_DIR"
SEALING_KEYS_ENV = "SYNCLINE_SEALING_KEYS"
"""The sponsor's data-key store (a file, or the directory ``post-task`` writes them to) for
``POST /api/runs/{id}/sealed-manifest/build``; its password is ``$SYNCLINE_SEALING_PASSWORD``."""
MAX_SOURCE_BYTES = 64 << 20
MAX_SOURCE_RECORDS = 200_000


def devnet_dir() -> Path:
    return state_dir() / "devnet"


def default_deployment_path() -> Path:
    return devnet_dir() / "deployment.json"


def devnet_blob_store() -> str | None:
    """The blob service ``syncline devnet up`` started (``blobstore.json``), if any."""
    path = devnet_dir() / "blobstore.json"
    try:
        return str(json.loads(path.read_text())["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_frontend_dir() -> Path:
    return repo_root() / "frontend" / "dist"


@dataclass
class ApiSettings:
    """Everything ``create_app`` needs. ``port=0`` picks any free port."""

    deployment: Path
    blob_store: str
    rpc_url: str | None = None
    db_url: str | None = None
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    frontend_dir: Path | None = None
    poll_interval_s: float = 1.0
    state_dir: Path | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    batch_blocks: int = 2_000
    prepare_per_minute: int = 4
    """Task preparations (``POST /api/tasks/prepare``) one client address may start per minute."""
    max_lag_blocks: int = 20
    """``/healthz`` reports ``degraded`` when the index is further than this behind the chain head."""
    data_dir: Path | None = None
    """The only directory a prepare request's ``corpus.path`` and ``model.pretrained`` may name
    (``syncline api --data-dir``; default: ``$SYNCLINE_API_DATA_DIR``, else ``<state_dir>/data``): a web
    client cannot make the server read any other file."""
    max_source_bytes: int = MAX_SOURCE_BYTES
    max_source_records: int = MAX_SOURCE_RECORDS
    sealing_keys: Path | None = None
    """The sponsor's data-key store for ``POST /api/runs/{id}/sealed-manifest/build``: one store
    file (``syncline train post-task`` writes ``<state_dir>/sealing/<spec hash>.json``) or a
    directory of them named by spec hash (default: ``$SYNCLINE_SEALING_KEYS``; unset: the endpoint
    answers 503). Only a sponsor's own server holds it; the password is only ever read from
    ``$SYNCLINE_SEALING_PASSWORD`` when a build runs."""
    seal_builds_per_minute: int = 4
    """Authorised sealed-manifest builds one client address may start per minute (each runs scrypt)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``host`` or ``host:port``) a state-changing request may name besides 127.0.0.1 /
    localhost with the server's port (``--allowed-host``; plus ``$SYNCLINE_API_ALLOWED_HOSTS``):
    ``syncline.api.origin.OriginGuard``."""

    @property
    def api_dir(self) -> Path:
        """``<state_dir>/api``: the default database and the model archive cache."""
        path = (self.state_dir or state_dir()) / "api"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def data_dir_configured(self) -> bool:
        """Whether the data directory was chosen (``--data-dir``, ``$SYNCLINE_API_DATA_DIR``)
        rather than the default ``<state_dir>/data``."""
        return self.data_dir is not None or bool(os.environ.get(DATA_DIR_ENV))

    @property
    def source_dir(self) -> Path:
        """Where ``corpus.path`` is read from (created empty if missing)."""
        configured = self.data_dir or (Path(os.environ[DATA_DIR_ENV]) if os.environ.get(DATA_DIR_ENV) else None)
        path = configured or (self.state_dir or state_dir()) / "data"
        path.mkdir(parents=True, exist_ok=True)
        return path.resolve()

    @property
    def sealing_keys_path(self) -> Path | None:
        """``sealing_keys``, else ``$SYNCLINE_SEALING_KEYS``; None when neither is set."""
        if self.sealing_keys is not None:
            return self.sealing_keys
        configured = os.environ.get(SEALING_KEYS_ENV)
        return Path(configured) if configured else None

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.api_dir / 'index.db'}"

    @property
    def static_dir(self) -> Path:
        return self.frontend_dir or default_frontend_dir()
