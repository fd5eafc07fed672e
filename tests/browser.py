"""A real browser for the console's tests: the system's headless Chromium driven by Playwright, one
per session, a fresh context (storage, viewport) per page; and what the tests share to act as an
operator (sign in, wait for a page, check it fits)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Debian's Chromium (`apt-get install chromium`; .ci/run installs it): Playwright's own browser
# download cannot be used here.
CHROMIUM = os.environ.get("AGENT_MEMORY_CHROMIUM", "/usr/bin/chromium")
# No calls out of the machine (its network is closed: they fail, many at a time), no GPU, no sandbox as root.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}
# Bound of every wait for background work: generous, for a loaded two-core machine.
WAIT_S = 300
# Playwright's assertions wait this long (ms) for what a page shows: a page waits for the API.
SHOWN_MS = 30_000


def expect(actual: Any, message: str | None = None) -> Any:
    """Playwright's `expect`, imported when a browser test runs: the test modules load (and their unit
    tests run) where Playwright is not installed."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(actual, message)


def unique_user(tag: str = "console") -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


def wait_job(client: Any, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while (job := client.get(f"/v1/jobs/{job_id}").json())["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.2)
    return job


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """The system's Chromium, headless, for one module's tests: Playwright's sync API runs an event
    loop in this thread while it is open, and the modules after these run asyncio loops of their own."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail("Playwright is not installed: pip install -e '.[dev]' (make test does)")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: install it (apt-get install chromium; .ci/run does) "
                    "or name another with AGENT_MEMORY_CHROMIUM")
    expect.set_options(timeout=SHOWN_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


class Console:
    """One browser tab on the console, signed in (or not) with one of the test API keys."""

    def __init__(self, browser: Any, url: str, viewport: dict[str, int]) -> None:
        self.url = url
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.errors: list[str] = []  # uncaught errors, and what the Content-Security-Policy refused
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.on("console", self._console)
        self.page.on("dialog", lambda dialog: (self.errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))

    def _console(self, message: Any) -> None:
        text = message.text
        if "Content Security Policy" in text or "Trusted Type" in text:
            self.errors.append(f"policy: {text}")

    def open(self, route: str = "#/users") -> Any:
        """Go to `route` (what follows `/console/`) and wait until the page has what it asked for."""
        self.page.goto(f"{self.url}/console/{route}")
        self.ready()
        return self.page

    def ready(self) -> None:
        self.page.locator("section.page[data-ready]").wait_for(timeout=SHOWN_MS)

    def sign_in(self, key: str | None) -> Any:
        page = self.page
        page.goto(f"{self.url}/console/")
        page.get_by_label("API key").fill(key or "")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Users", exact=True)).to_be_visible()
        self.ready()
        return page

    def fits(self) -> tuple[int, int]:
        """(scrollWidth, clientWidth) of the page as shown: wider content than the window scrolls sideways."""
        return tuple(self.page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]"))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def console(browser: Any, serve_app: dict[str, Any]) -> Iterator[Callable[..., Console]]:
    """`console(key)`: a new tab signed in with `key` (None: not signed in); `viewport` by keyword.
    Each tab must end with no uncaught error and nothing refused by the page's policy."""
    tabs: list[Console] = []

    def open_tab(key: str | None = "acme-admin", viewport: dict[str, int] = WIDE) -> Console:
        tab = Console(browser, str(serve_app["url"]), viewport)
        tabs.append(tab)
        if key is not None:
            tab.sign_in(key)
        return tab

    yield open_tab
    errors = [e for tab in tabs for e in tab.errors]
    for tab in tabs:
        tab.close()
    assert not errors, errors


def screenshot(page: Any, path: Path, *, full_page: bool = True) -> None:
    """A PNG of the page as shown, in 64 colours (the console's are few): a few tens of kB for the docs."""
    from PIL import Image

    page.screenshot(path=path, full_page=full_page)
    with Image.open(path) as shot:
        small = shot.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where page screenshots go: CONSOLE_SCREENSHOTS (`make console-screenshots`: docs/console), or a temp dir."""
    named = os.environ.get("CONSOLE_SCREENSHOTS")
    folder = Path(named) if named else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
