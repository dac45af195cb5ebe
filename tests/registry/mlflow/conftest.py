"""A real `mlflow server` (SQLite backend store, file artifact root) shared by these tests, and a
freshly migrated Inferplane registry per test. Each test scopes its MLflow models with its own
name prefix, so tests share one server without seeing each other's models."""

from __future__ import annotations

import itertools

import pytest

from registry.db import make_session_factory
from registry.migrate import upgrade
from tests.conftest import free_port, start_process, stop_process, wait_http

_prefixes = itertools.count(1)


@pytest.fixture(scope="package")   # stopped once the folder is done
def mlflow_uri(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    proc = start_process(
        ["-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--default-artifact-root", (root / "artifacts").as_uri(), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        log_path=root / "server.log")
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{uri}/health", proc, timeout=120.0)
    except Exception:
        stop_process(proc)
        raise RuntimeError("mlflow server did not start:\n"
                           + (root / "server.log").read_text()[-3000:]) from None
    yield uri
    stop_process(proc)


@pytest.fixture
def client(mlflow_uri):
    from mlflow import MlflowClient
    return MlflowClient(tracking_uri=mlflow_uri, registry_uri=mlflow_uri)


@pytest.fixture
def prefix() -> str:
    return f"t{next(_prefixes)}-"


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url, progress=None)
    factory = make_session_factory(url)
    yield factory
    factory.kw["bind"].dispose()
