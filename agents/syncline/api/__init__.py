"""The sponsor API: an indexer of the market's events into a database, and an HTTP API (FastAPI)
over it that also serves the web UI. ``syncline api`` runs it; see docs/api.md."""

from __future__ import annotations

from syncline.api.app import create_app
from syncline.api.server import ApiServer
from syncline.api.settings import ApiSettings

__all__ = ["ApiServer", "ApiSettings", "create_app"]
