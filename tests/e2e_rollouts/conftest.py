"""One live stack for the test session (see stack.py); every process it started is stopped.
Tests share it safely: each registers its own model."""
from __future__ import annotations

import pytest

from tests.e2e_rollouts.stack import Stack, start_stack, stop_all


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    work = tmp_path_factory.mktemp("rollouts")
    live, procs = start_stack(work)
    try:
        yield live
    finally:
        live.client.close()
        stop_all(procs)
