"""Schemathesis against both surfaces: no server error, no undocumented status, responses as
documented, schema-valid requests accepted (bounded: a few examples per operation).

A longer, independent run: `python -m tests.fuzz.long_run --examples 200`.
"""
from __future__ import annotations

import httpx

from tests.fuzz.harness import fuzz
from tests.fuzz.prepare import admin_guard, openai_target

ADMIN_EXAMPLES, ADMIN_BUDGET_S = 6, 55
OPENAI_EXAMPLES, OPENAI_BUDGET_S = 25, 30   # 11 operations share it


def test_admin_surface(admin_server):
    report = fuzz(f"{admin_server.url}/openapi.json", admin_server.headers,
                  examples=ADMIN_EXAMPLES, budget_s=ADMIN_BUDGET_S,
                  prepare=admin_guard(admin_server.protected_key_id),
                  skip=lambda label: " /admin/" not in label)
    assert report.cases > 100, report.summary()
    assert not report.failures, report.summary()
    # The fuzzer's own credential survived everything it sent.
    me = httpx.get(f"{admin_server.url}/admin/v1/keys/{admin_server.protected_key_id}",
                   headers=admin_server.headers, trust_env=False)
    assert me.status_code == 200 and me.json()["role"] == "admin" and not me.json()["revoked"]


def test_openai_surface(openai_server):
    report = fuzz(f"{openai_server.url}/openapi.json", openai_server.headers,
                  examples=OPENAI_EXAMPLES, budget_s=OPENAI_BUDGET_S,
                  prepare=openai_target("fake"))
    assert report.statuses[200] > 10, report.summary()   # the served model was reached
    assert not report.failures, report.summary()
