"""``python -m syncline.blobstore --root DIR [--host H] [--port N] [--public-url U] [LIMITS...]``.

Every limit (``--max-bytes``, the upload slots, rate floors, deadline and quotas, the exempt
clients, ``--max-signer-slots``; see ``--help``) can also be set by the environment variable
``SYNCLINE_BLOBSTORE_<FLAG>`` (``--client-quota-bytes`` -> ``SYNCLINE_BLOBSTORE_CLIENT_QUOTA_BYTES``);
a flag on the command line wins.

Prints ``{"url": "http://HOST:PORT"}`` as one JSON line on stdout once the socket is bound, logs
one structured line per request on stderr, and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from syncline.blobstore.http_service import (
    DEFAULT_CONTENDED_MIN_BYTES_PER_S,
    DEFAULT_EXEMPT_CLIENTS,
    DEFAULT_MAX_CONCURRENT_UPLOADS,
    DEFAULT_MAX_UPLOAD_S,
    DEFAULT_MIN_FREE_BYTES,
    DEFAULT_MIN_UPLOAD_BYTES_PER_S,
    DEFAULT_QUOTA_WINDOW_S,
    DEFAULT_SLOW_UPLOAD_GRACE_S,
    DEFAULT_VERIFY_BYTES,
    BlobService,
)
from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import DEFAULT_MAX_BLOB_BYTES, MAX_SIGNER_SLOTS
from syncline.observability import configure_logging

ENV_PREFIX = "SYNCLINE_BLOBSTORE_"


def _env_name(flag: str) -> str:
    """``--max-bytes`` -> ``SYNCLINE_BLOBSTORE_MAX_BYTES``."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _limit(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: Callable[[str], Any],
    default: Any,
    text: str,
    *,
    env: Mapping[str, str],
) -> None:
    """A limit flag whose default comes from ``SYNCLINE_BLOBSTORE_<FLAG>`` when that is set."""
    name = _env_name(flag)
    value = default
    if name in env:
        try:
            value = kind(env[name])
        except ValueError:
            parser.error(f"{name}={env[name]!r} is not a valid value for {flag}")
    shown = "auto" if default is None else default
    parser.add_argument(flag, type=kind, default=value, help=f"{text} (default {shown}; env {name})")


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The command-line interface of the blob service; every limit also reads ``SYNCLINE_BLOBSTORE_*``
    from ``env`` (default ``os.environ``), a flag given on the command line winning."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m syncline.blobstore", description="Serve a local blob store over HTTP."
    )
    parser.add_argument("--root", type=Path, required=True, help="directory of the store (created if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    parser.add_argument("--public-url", default=None, help="base URL other agents use to reach this service")
    limits: list[tuple[str, Callable[[str], Any], Any, str]] = [
        (
            "--max-bytes",
            int,
            DEFAULT_MAX_BLOB_BYTES,
            "largest accepted upload in bytes (the default is the state of a 2e9-parameter model)",
        ),
        ("--min-free-bytes", int, DEFAULT_MIN_FREE_BYTES, "disk space an upload must leave free, else 507"),
        ("--verify-bytes", int, DEFAULT_VERIFY_BYTES, "blobs up to this size are hashed before they are served"),
        ("--request-timeout-s", float, 30.0, "socket timeout per connection; also the longest wait for a slot"),
        ("--max-concurrent-uploads", int, DEFAULT_MAX_CONCURRENT_UPLOADS, "uploads in progress at once"),
        ("--max-uploads-per-client", int, None, "of those, at most this many from one client address (auto: 1/4)"),
        ("--max-uploads-per-network", int, None, "and from one /24 (IPv4) or /64 (IPv6) network (auto: 1/2)"),
        (
            "--min-upload-bytes-per-s",
            int,
            DEFAULT_MIN_UPLOAD_BYTES_PER_S,
            "after the request timeout, uploads slower than this on average are cut with 408",
        ),
        (
            "--contended-min-upload-bytes-per-s",
            int,
            DEFAULT_CONTENDED_MIN_BYTES_PER_S,
            "while an upload waits for a slot, the slowest upload under this average is cut with 503",
        ),
        ("--slow-upload-grace-s", float, DEFAULT_SLOW_UPLOAD_GRACE_S, "time with a slot before that floor applies"),
        ("--max-upload-s", float, DEFAULT_MAX_UPLOAD_S, "the longest one upload may take (408 after)"),
        (
            "--client-quota-bytes",
            int,
            None,
            "bytes one client address may upload per quota window, else 429 with Retry-After "
            "(auto: 1/8 of the store's volume, at most 64 GiB; 0: no limit)",
        ),
        (
            "--network-quota-bytes",
            int,
            None,
            "bytes one /24 or /64 network may upload per quota window (auto: twice the client quota; 0: no limit)",
        ),
        ("--quota-window-s", float, DEFAULT_QUOTA_WINDOW_S, "the quota window"),
        (
            "--exempt-clients",
            str,
            DEFAULT_EXEMPT_CLIENTS,
            "comma-separated addresses or networks free of the per-client and per-network limits "
            "(the service's own machine; '' for none, e.g. behind a reverse proxy on this machine)",
        ),
        ("--max-signer-slots", int, MAX_SIGNER_SLOTS, "signers' slots one alias holds at most (409 beyond)"),
        ("--max-connections-per-client", int, 64, "open connections one client address may hold"),
    ]
    for flag, kind, default, text in limits:
        _limit(parser, flag, kind, default, text, env=env)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the service in the foreground until SIGTERM / SIGINT.

    Parameters
    ----------
    argv : Sequence[str], optional
        Arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Process exit status.
    """
    args = build_parser().parse_args(argv)
    configure_logging()  # logs go to stderr; stdout carries only the URL line
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service = BlobService(
            LocalBlobStore(args.root, max_signer_slots=args.max_signer_slots),
            host=args.host,
            port=args.port,
            max_bytes=args.max_bytes,
            public_url=args.public_url,
            min_free_bytes=args.min_free_bytes,
            verify_bytes=args.verify_bytes,
            max_concurrent_uploads=args.max_concurrent_uploads,
            max_uploads_per_client=args.max_uploads_per_client,
            max_uploads_per_network=args.max_uploads_per_network,
            min_upload_bytes_per_s=args.min_upload_bytes_per_s,
            contended_min_upload_bytes_per_s=args.contended_min_upload_bytes_per_s,
            slow_upload_grace_s=args.slow_upload_grace_s,
            max_upload_s=args.max_upload_s,
            client_quota_bytes=args.client_quota_bytes,
            network_quota_bytes=args.network_quota_bytes,
            quota_window_s=args.quota_window_s,
            exempt_clients=args.exempt_clients,
            max_connections_per_client=args.max_connections_per_client,
            request_timeout_s=args.request_timeout_s,
        ).start()
    except (OSError, ValueError) as exc:
        print(f"syncline.blobstore: cannot start: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"url": service.url}), flush=True)
    try:
        while not stop.wait(timeout=1.0):
            pass
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
