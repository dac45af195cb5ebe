"""The marker lists of tests/conftest.py name tests and fixtures that exist."""
from __future__ import annotations

from tests import conftest


def test_every_marked_fixture_and_node_exists():
    assert conftest.stale_marker_entries() == []


def test_a_moved_fixture_is_reported(monkeypatch):
    monkeypatch.setitem(conftest.MARKED_FIXTURES, "e2e",
                        [*conftest.MARKED_FIXTURES["e2e"], "tests/gateway/conftest.py::gone",
                         "tests/nowhere/conftest.py::stack"])
    assert conftest.stale_marker_entries() == ["tests/gateway/conftest.py::gone",
                                               "tests/nowhere/conftest.py::stack"]
