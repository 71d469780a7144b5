"""``python -m syncline.blobstore --root DIR [--host H] [--port N] [--max-bytes B] [--min-free-bytes B]
[--verify-bytes B] [--max-concurrent-uploads N] [--min-upload-bytes-per-s R] [--request-timeout-s S]``.

Prints ``{"url": "http://HOST:PORT"}`` as one JSON line on stdout once the socket is bound, logs
one structured line per request on stderr, and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from syncline.blobstore.http_service import DEFAULT_MIN_FREE_BYTES, DEFAULT_VERIFY_BYTES, BlobService
from syncline.blobstore.local import LocalBlobStore
from syncline.blobstore.store import DEFAULT_MAX_BLOB_BYTES
from syncline.observability import configure_logging


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of the blob service."""
    parser = argparse.ArgumentParser(
        prog="python -m syncline.blobstore", description="Serve a local blob store over HTTP."
    )
    parser.add_argument("--root", type=Path, required=True, help="directory of the store (created if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BLOB_BYTES,
        help=f"largest accepted upload in bytes (default {DEFAULT_MAX_BLOB_BYTES}: the state of a 2e9-parameter model)",
    )
    parser.add_argument(
        "--min-free-bytes",
        type=int,
        default=DEFAULT_MIN_FREE_BYTES,
        help=f"disk space an upload must leave free, else 507 (default {DEFAULT_MIN_FREE_BYTES})",
    )
    parser.add_argument(
        "--verify-bytes",
        type=int,
        default=DEFAULT_VERIFY_BYTES,
        help=f"blobs up to this size are hashed before they are served (default {DEFAULT_VERIFY_BYTES})",
    )
    parser.add_argument("--max-concurrent-uploads", type=int, default=8, help="uploads in progress at once")
    parser.add_argument(
        "--min-upload-bytes-per-s",
        type=int,
        default=256 * 1024,
        help="after the request timeout, uploads slower than this on average are cut with 408",
    )
    parser.add_argument("--request-timeout-s", type=float, default=30.0, help="socket timeout per connection")
    parser.add_argument("--public-url", default=None, help="base URL other agents use to reach this service")
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
            LocalBlobStore(args.root),
            host=args.host,
            port=args.port,
            max_bytes=args.max_bytes,
            public_url=args.public_url,
            min_free_bytes=args.min_free_bytes,
            verify_bytes=args.verify_bytes,
            max_concurrent_uploads=args.max_concurrent_uploads,
            min_upload_bytes_per_s=args.min_upload_bytes_per_s,
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
