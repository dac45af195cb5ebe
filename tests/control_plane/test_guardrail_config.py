"""The YAML `guardrails:` section: refused at load with the bad key's path, written into the
registry at start (policies replaced by the file, bindings by key name), seen in the snapshot."""
from __future__ import annotations

import pytest

from control_plane.guardrail_config import register_guardrails
from control_plane.settings import SettingsError, load_settings
from registry import queries as q
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.snapshot import build_snapshot
from tests.registry.databases import sqlite_url  # noqa: F401

YAML = """
models: []
guardrails:
  policies:
    pii: {pii: {email: mask}, body_log: metadata}
  models: {chat: pii}
  keys: {alice: pii, nobody: pii}
"""


def test_bad_keys_refused_with_their_path(tmp_path):
    path = tmp_path / "inferplane.yaml"
    path.write_text("guardrails:\n  policies:\n    p: {pii: {mail: mask}}\n")
    with pytest.raises(SettingsError, match=r"guardrails\.policies\.p\.pii\.mail"):
        load_settings(path)
    path.write_text("guardrails:\n  policies: {}\n  models: {chat: missing}\n")
    with pytest.raises(SettingsError, match="no policy named 'missing'"):
        load_settings(path)


def test_registered_and_delivered(tmp_path, sqlite_url):
    path = tmp_path / "inferplane.yaml"
    path.write_text(YAML)
    settings = load_settings(path)
    upgrade(sqlite_url, progress=None)
    sessions = make_session_factory(sqlite_url)
    with sessions.begin() as s:
        alice, _ = q.create_key(s, "alice")
    assert register_guardrails(sessions, settings.guardrails) == ["nobody"]
    path.write_text(YAML.replace("email: mask", "email: block"))
    register_guardrails(sessions, load_settings(path).guardrails)   # a restart: replaced
    with sessions() as s:
        view = build_snapshot(s).guardrails
    assert view.policy_for("chat", None).spec["pii"] == {"email": "block"}
    assert view.policy_for("other", alice.id).name == "pii"
    assert view.policy_for("other", None) is None
    sessions.kw["bind"].dispose()
