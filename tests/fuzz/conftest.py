"""Servers for the fuzz tests: one admin surface and one OpenAI surface for this folder."""
from __future__ import annotations

import pytest

from tests.fuzz.servers import start_admin, start_fake_engine, start_openai

ADMIN_PORT, OPENAI_PORT, ENGINE_PORT = 19101, 19102, 19103


@pytest.fixture(scope="package")
def admin_server(tmp_path_factory):
    server = start_admin(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'registry.db'}",
                         ADMIN_PORT)
    yield server
    server.stop()
    server.sessions.kw["bind"].dispose()


@pytest.fixture(scope="package")
def openai_server():
    engine = start_fake_engine(ENGINE_PORT)
    server = start_openai(f"http://127.0.0.1:{ENGINE_PORT}/v1", OPENAI_PORT)
    yield server
    server.stop()
    engine.terminate()
    engine.wait(timeout=10)
