"""register_models: the configured models and fixed backends written to a real registry, and
the engines of hot models (builtin or vllm) returned to start, each with its `starting` row."""
from __future__ import annotations

from sqlalchemy import select

from control_plane.bootstrap import register_models
from control_plane.settings import Settings
from registry.db import make_session_factory
from registry.migrate import upgrade
from registry.orm.catalog import Backend


def test_hot_engines_of_each_kind_are_returned_and_recorded(sqlite_url):
    upgrade(sqlite_url, progress=None)
    sessions = make_session_factory(sqlite_url)
    settings = Settings(engine_port_base=18400, models=[
        {"name": "chat", "engine": "vllm", "model": "/models/chat-hf", "replicas": 2,
         "executable": "/opt/vllm/bin/vllm", "engine_env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
        {"name": "tiny", "engine_args": {"simulate": True}},
        {"name": "later", "engine": "vllm", "tier": "cold"},
        {"name": "remote", "engine": "vllm", "backends": [{"url": "http://10.0.0.5:8000/v1",
                                                         "engine": "vllm"}]}],
        tiers={"executables": ["/opt/vllm/bin/vllm", "vllm"]})
    try:
        specs = register_models(sessions, settings)
        assert [(s.name, s.engine) for s in specs] == [("chat", "vllm"), ("chat", "vllm"),
                                                       ("tiny", "builtin")]
        assert len({s.port for s in specs}) == 3
        assert specs[0].executable == "/opt/vllm/bin/vllm"
        assert specs[0].env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
        with sessions() as s:
            rows = {b.url: b for b in s.scalars(select(Backend))}
            assert {(b.engine, b.managed, b.state) for b in rows.values()} == {
                ("vllm", True, "starting"), ("builtin", True, "starting"),
                ("vllm", False, "ready")}
            assert rows[specs[0].url].command == specs[0].command()
            assert "VLLM_CPU_KVCACHE_SPACE" not in " ".join(rows[specs[0].url].command)
    finally:
        sessions.kw["bind"].dispose()


def test_an_engine_state_sets_only_the_managed_rows_at_its_url(sqlite_url):
    """The supervisor's report on the engine at a URL leaves an unmanaged row registered at the
    same URL alone: that row's state comes from its own health probes."""
    from control_plane.bootstrap import set_backend_state
    from registry import queries as q

    upgrade(sqlite_url, progress=None)
    sessions = make_session_factory(sqlite_url)
    url = "http://127.0.0.1:18500/v1"
    try:
        with sessions.begin() as s:
            q.create_model(s, "engine")
            managed_id = q.add_backend(s, "engine", url, state="starting", managed=True).id
            unmanaged_id = q.add_backend(s, "engine", url, served_model="alias",
                                         state="down").id
        assert set_backend_state(sessions, url, "ready") is True
        assert set_backend_state(sessions, url, "ready") is False   # no change, no bump
        with sessions() as s:
            assert {b.id: b.state for b in s.scalars(select(Backend))} == {
                managed_id: "ready", unmanaged_id: "down"}
    finally:
        sessions.kw["bind"].dispose()
