"""Browser fixtures: Debian's Chromium (``/usr/bin/chromium``, installed by ``make test``) driven by
Python Playwright, against the real API server (uvicorn on 127.0.0.1) serving the built frontend.

Every page a test opens records console errors and uncaught exceptions; ``page_errors`` hands
them to the test, which asserts there are none.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FRONTEND_DIST = REPO / "frontend" / "dist"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail("no Chromium at /usr/bin/chromium: run `make test` (it installs Debian's chromium)")
    if not (FRONTEND_DIST / "index.html").exists():
        pytest.fail("frontend/dist is missing: run `make install` (it builds the frontend)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class PageErrors(list[str]):
    """Console errors and uncaught page exceptions seen so far."""

    def attach(self, page: Any) -> None:
        page.on("console", lambda msg: self.append(f"console: {msg.text}") if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.append(f"pageerror: {exc}"))


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def new_page(browser: Any, page_errors: PageErrors) -> Iterator[Any]:
    """A fresh browser context (1280x800, a laptop screen) and page."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(20_000)
    page_errors.attach(page)
    try:
        yield page
    finally:
        context.close()
