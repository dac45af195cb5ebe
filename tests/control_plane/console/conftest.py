"""Fixtures for the console tests: the admin API on real databases, and Playwright driving
Debian's chromium (no browser download: `make tools` installs the `chromium` package)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from tests.control_plane.conftest import env, env_any  # noqa: F401  (admin API on real databases)
from tests.registry.databases import any_url, pg_url, sqlite_url  # noqa: F401

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "console"


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed (make tools installs the Debian package)"
    return path


@pytest.fixture(scope="module")
def browser():
    """One chromium per module, stopped with it: Playwright's sync API runs an event loop on
    this thread while it is started, which would break every asyncio test after it."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(),
                                             args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh browser context (no sessionStorage, cookies or downloads carried over)."""
    context = browser.new_context(viewport={"width": 1300, "height": 900}, accept_downloads=True,
                                  permissions=["clipboard-read", "clipboard-write"])
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
