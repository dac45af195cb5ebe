"""The backend allowlist: refused URLs at registration, and probes that never leave."""
from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from control_plane.backend_allowlist import BackendAllowlist
from control_plane.health import HealthProber
from registry import queries as q
from registry.errors import InvalidError
from registry.orm.catalog import Backend
from tests.control_plane.conftest import build_admin_app

LOOPBACK_ONLY = ["127.0.0.1/32", "::1/128", "localhost"]


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data",      # AWS, GCP, Azure metadata
    "http://[fd00:ec2::254]/latest",                 # AWS metadata over IPv6
    "http://metadata.google.internal/computeMetadata/v1",
    "http://169.254.10.1:8000/v1",                  # any link-local address
    "http://[fe80::1]:8000/v1",
    "http://[::ffff:169.254.169.254]/",             # IPv4-mapped IPv6
    "file:///etc/passwd", "http:///v1",
])
def test_metadata_and_link_local_are_refused_without_configuration(url):
    with pytest.raises(InvalidError) as exc:
        BackendAllowlist.from_networks(None).check(url)
    assert exc.value.param == "url" and exc.value.code == "backend_not_allowed"


def test_anywhere_else_is_allowed_without_configuration():
    allowlist = BackendAllowlist.from_networks(None)
    for url in ("http://10.0.0.5:8000/v1", "http://127.0.0.1:8100/v1", "https://[2001:db8::1]/v1"):
        allowlist.check(url)


def test_configured_networks_and_names():
    allowlist = BackendAllowlist.from_networks(["10.0.0.0/8", "vllm.internal", "::1/128"])
    allowlist.check("http://10.1.2.3:8000/v1")
    allowlist.check("http://[::1]:8000/v1")
    allowlist.check("http://VLLM.internal:8000/v1")  # a listed name needs no resolution
    with pytest.raises(InvalidError, match=r"192\.168\.0\.1.*not in backends.allowed_networks"):
        allowlist.check("http://192.168.0.1:8000/v1")
    with pytest.raises(InvalidError, match="does not resolve"):
        allowlist.check("http://no-such-host.invalid:8000/v1")


def test_names_are_resolved_and_their_addresses_checked():
    # localhost resolves to loopback: in 127.0.0.0/8, outside 10.0.0.0/8
    BackendAllowlist.from_networks(["127.0.0.0/8", "::1/128"]).check("http://localhost:9/v1")
    with pytest.raises(InvalidError, match="localhost"):
        BackendAllowlist.from_networks(["10.0.0.0/8"]).check("http://localhost:9/v1")


def test_http_targets_are_pinned_to_the_checked_address():
    target = BackendAllowlist.from_networks(["127.0.0.0/8"]).pin("http://localhost:8123/v1")
    assert target.url == "http://127.0.0.1:8123/v1" and target.host_header == "localhost:8123"


async def test_registration_is_refused_with_a_precise_4xx(tmp_path):
    app, sessions, _, keys = build_admin_app(f"sqlite:///{tmp_path / 'r.db'}")
    app.state.backend_allowlist = BackendAllowlist.from_networks(LOOPBACK_ONLY)
    admin = {"Authorization": f"Bearer {keys['operator']}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://admin") as client:
        assert (await client.post("/admin/v1/models", json={"name": "m"}, headers=admin)
                ).status_code == 201
        for url in ("http://169.254.169.254/v1", "http://10.0.0.7:8000/v1"):
            resp = await client.post("/admin/v1/backends", headers=admin,
                                     json={"model": "m", "url": url})
            assert resp.status_code in (400, 422), resp.text
            assert resp.json()["error"]["param"] == "url"
            assert "backend host" in resp.json()["error"]["message"]
        ok = await client.post("/admin/v1/backends", headers=admin,
                               json={"model": "m", "url": "http://127.0.0.1:9/v1"})
        assert ok.status_code == 201, ok.text
    with sessions() as s:
        assert [b.url for b in s.query(Backend)] == ["http://127.0.0.1:9/v1"]


class _Listener:
    """A TCP listener that counts the connections it accepts (and answers none)."""

    def __init__(self, host: str):
        self.accepted = 0
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}/v1"

    async def serve(self):
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self.sock)
            self.accepted += 1
            conn.close()


async def test_a_probe_to_a_disallowed_address_never_leaves(tmp_path):
    from registry.db import make_session_factory
    from registry.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'p.db'}"
    upgrade(url, progress=None)
    sessions = make_session_factory(url)
    allowed, refused = _Listener("127.0.0.1"), _Listener("127.0.0.2")  # a loopback alias
    with sessions.begin() as s:
        model = q.upsert_model(s, "m")[0]
        for listener in (allowed, refused):
            s.add(Backend(model_id=model.id, url=listener.url, engine="vllm", served_model="m",
                          state="ready", managed=False))
    prober = HealthProber(sessions, on_change=lambda: None, timeout_s=0.5, failures_to_down=1,
                          allowlist=BackendAllowlist.from_networks(["127.0.0.1/32"]))
    tasks = [asyncio.create_task(x.serve()) for x in (allowed, refused)]
    try:
        async with httpx.AsyncClient() as client:
            await prober.probe_once(client)
            await prober.probe_once(client)
    finally:
        for t in tasks:
            t.cancel()
    assert allowed.accepted >= 1          # the allowed one was really probed
    assert refused.accepted == 0          # the refused one was never contacted
    with sessions() as s:
        states = {b.url: b.state for b in s.query(Backend)}
    assert states[refused.url] == "down" and states[allowed.url] == "down"
