"""A port in use is found before anything loads: a clear error, a non-zero exit, no "ready"."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import ROOT


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def _run(args: list[str], cwd) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_engine_serve_checks_its_port_before_loading_the_model(taken_port):
    rc, out, _ = _run(["-m", "builtin_engine", "serve", "--model", "smollm2-135m-instruct",
                       "--port", str(taken_port)], ROOT)
    assert rc == 1, out
    assert f"cannot listen on 127.0.0.1:{taken_port}" in out and "in use" in out
    assert "[engine] ready" not in out and "loaded in" not in out and "%" not in out


def test_up_checks_its_port_before_starting_engines(taken_port, tmp_path):
    config = tmp_path / "inferplane.yaml"
    config.write_text(yaml.safe_dump({"models": [{"name": "smollm2-135m-instruct"}]}))
    rc, out, _ = _run(["-m", "control_plane", "up", "--config", str(config),
                       "--port", str(taken_port)], tmp_path)
    assert rc == 1, out
    assert f"cannot listen on 127.0.0.1:{taken_port}" in out
    assert "starting" not in out and "ready:" not in out and "migrations" not in out
