"""``python -m syncline.chain.clock_service --rpc-url URL --speed N``: a local devnet's fast clock
as a process of its own (:class:`~syncline.chain.devnet.DevnetClock`), which ``syncline devnet up
--clock-speed N`` starts detached beside anvil and ``syncline devnet down`` stops.

It runs until SIGTERM or SIGINT, or until the node stops answering."""

from __future__ import annotations

import argparse
import signal
import threading

from syncline.chain.devnet import DevnetClock
from syncline.chain.rpc import http_web3
from syncline.observability import configure_logging, get_logger

log = get_logger("syncline.devnet")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m syncline.chain.clock_service", description=__doc__)
    parser.add_argument("--rpc-url", required=True, help="the local devnet's JSON-RPC URL (anvil)")
    parser.add_argument("--speed", type=float, required=True, help="chain seconds per wall second (> 1)")
    args = parser.parse_args(argv)
    configure_logging()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    clock = DevnetClock(http_web3(args.rpc_url), args.speed).start()
    try:
        while not stop.wait(1.0):
            if not clock.running:
                return 1
    finally:
        clock.stop()
    log.info("devnet.clock_done", advanced_s=clock.advanced_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
