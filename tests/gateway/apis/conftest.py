"""Shared by the client-API tests: one `inferplane up` with the real model beside a fake
engine (for faults the real model cannot be asked for), and keys made through the admin API."""
from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from tests.conftest import free_port, running_up
from tests.e2e.faults.conftest import Stack, openai_model, start_fake_engine, stop_process

MODEL = "smollm2-135m-instruct"
FLAKY = "flaky"       # served by tests/gateway/fake_engine.py


@contextlib.contextmanager
def client_api_stack(work):
    """(Stack with a user key, fake engine control URL) for the module."""
    engine_port = free_port()
    engine = start_fake_engine(engine_port, FLAKY, work / "fake.log")
    config = {"engine_port_base": free_port(),
              "models": [{"name": MODEL, "engine_args": {"max_num_seqs": 4},
                          "price_in_per_1k": 0.01, "price_out_per_1k": 0.02},
                         openai_model(FLAKY, f"http://127.0.0.1:{engine_port}/v1")]}
    try:
        with running_up(work, config) as (base, key, _):
            stack = Stack(base, key)
            stack.create_key()
            yield stack, f"http://127.0.0.1:{engine_port}/control"
    finally:
        stop_process(engine)


@pytest.fixture(scope="module")
def up(tmp_path_factory, request):
    """One client_api_stack per test module that asks for it."""
    with client_api_stack(tmp_path_factory.mktemp(request.module.__name__.split(".")[-1])) \
            as running:
        yield running


@pytest.fixture(scope="module")
def stack(up) -> Stack:
    return up[0]


@contextlib.contextmanager
def engine_faults(control: str, **faults):
    """The fake engine misbehaving (tests/gateway/fake_engine.py DEFAULTS) for a block."""
    httpx.post(control, json=faults, timeout=10).raise_for_status()
    try:
        yield
    finally:
        httpx.post(control, json={"reset": True}, timeout=10).raise_for_status()


def new_key(stack: Stack, **fields) -> str:
    """A user key with these fields (rpm_limit, max_budget, ...), once gateways know it."""
    other = Stack(stack.base, stack.admin_key)
    other.create_key(**fields)
    time.sleep(1.5)     # the next snapshot carries the new key
    return other.key
