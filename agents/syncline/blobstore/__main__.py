"""``python -m syncline.blobstore --root DIR [--host H] [--port N] [--max-bytes B]``.

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

from syncline.blobstore.http_service import BlobService
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
        "--max-bytes", type=int, default=DEFAULT_MAX_BLOB_BYTES, help="largest accepted upload in bytes"
    )
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
