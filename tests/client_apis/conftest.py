"""Shared by the client-API tests: keys made through the admin API."""
from __future__ import annotations

import time

from tests.faults.conftest import Stack


def new_key(stack: Stack, **fields) -> str:
    """A user key with these fields (rpm_limit, max_budget, ...), once gateways know it."""
    other = Stack(stack.base, stack.admin_key)
    other.create_key(**fields)
    time.sleep(1.5)     # the next snapshot carries the new key
    return other.key
