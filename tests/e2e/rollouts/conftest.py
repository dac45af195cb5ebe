"""One live stack for the tests in this folder (see stack.py), stopped with every process it
started once they are done: its `inferplane up` keeps ticking rollouts while it lives, so it must
not outlive them. Tests share it safely: each registers its own model."""
from __future__ import annotations

import pytest

from tests.e2e.rollouts.stack import Stack, start_stack, stop_all


@pytest.fixture(scope="package")
def stack(tmp_path_factory) -> Stack:
    work = tmp_path_factory.mktemp("rollouts")
    live, procs = start_stack(work)
    try:
        yield live
    finally:
        live.client.close()
        stop_all(procs)
