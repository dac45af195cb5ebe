"""Fixtures for the console tests: the admin API on real databases, and Playwright driving
Debian's chromium (no browser download: `make tools` installs the `chromium` package)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.control_plane.conftest import env, env_any  # noqa: F401  (admin API on real databases)
from tests.registry.databases import any_url, pg_url, sqlite_url  # noqa: F401

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed (make tools installs the Debian package)"
    return path


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": chromium_path(),
            "args": ["--no-sandbox", "--disable-dev-shm-usage"]}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1300, "height": 900},
            "permissions": ["clipboard-read", "clipboard-write"]}


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
