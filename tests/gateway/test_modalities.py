"""Content types a model does not declare are refused by the gateway (text-only by default),
and a model's declared modalities travel from the admin API through the snapshot."""
from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from common.errors import OpenAIError
from gateway.apis.chat.endpoint import CHAT
from gateway.request_path.modalities import check_content
from registry.snapshot import build_snapshot
from tests.control_plane.conftest import build_admin_app
from tests.gateway.conftest import backend, chat_body, model

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}


def _parts(*parts) -> list[dict]:
    return [{"role": "system", "content": "brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is this?"}, *parts]}]


def test_a_text_only_model_refuses_image_audio_and_file_parts(engines, make_gateway):
    gw = make_gateway([model("m", [backend(engines[0])])])
    with gw.client() as client:
        for part in (IMAGE, AUDIO, {"type": "file", "file": {"file_id": "f"}}):
            resp = client.post("/v1/chat/completions", json=chat_body(messages=_parts(part)))
            error = resp.json()["error"]
            assert resp.status_code == 400, resp.text
            assert error["param"] == "messages[1].content[1]"
            assert error["code"] == "unsupported_content_type" and part["type"] in error["message"]
        assert engines[0].stats()["requests"] == 0  # refused before any backend was called
        ok = client.post("/v1/chat/completions", json=chat_body(messages=_parts()))
        assert ok.status_code == 200, ok.text


def test_a_model_declaring_images_accepts_them_but_not_audio(engines, make_gateway):
    vision = replace(model("m", [backend(engines[0])]), modalities=("text", "image"))
    gw = make_gateway([vision])
    with gw.client() as client:
        assert client.post("/v1/chat/completions",
                           json=chat_body(messages=_parts(IMAGE))).status_code == 200
        assert engines[0].stats()["last_body"]["messages"][1]["content"][1] == IMAGE
        resp = client.post("/v1/chat/completions", json=chat_body(messages=_parts(AUDIO)))
        assert resp.status_code == 400 and "audio" in resp.json()["error"]["message"]


def test_unknown_part_types_are_refused():
    with pytest.raises(OpenAIError) as exc:
        check_content(CHAT, {"messages": [{"role": "user", "content": [{"type": "blob"}]}]},
                      model("m", []))
    assert exc.value.status == 400 and exc.value.param == "messages[0].content[0].type"


async def test_modalities_go_from_the_admin_api_into_the_snapshot(tmp_path):
    app, sessions, _, keys = build_admin_app(f"sqlite:///{tmp_path / 'm.db'}")
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://admin") as client:
        assert (await client.post("/admin/v1/models", headers=admin, json={"name": "plain"})
                ).status_code == 201
        made = await client.post("/admin/v1/models", headers=admin,
                                 json={"name": "vision", "modalities": ["text", "image"]})
        assert made.status_code == 201 and made.json()["modalities"] == ["text", "image"]
        bad = await client.post("/admin/v1/models", headers=admin,
                                json={"name": "odd", "modalities": ["smell"]})
        assert 400 <= bad.status_code < 500
    with sessions() as session:
        snap = build_snapshot(session)
    assert snap.models["plain"].modalities == ("text",)
    assert snap.models["vision"].modalities == ("text", "image")


def test_a_fallback_that_cannot_read_the_content_is_skipped(engines, make_gateway):
    vision = replace(model("m", [backend(engines[0])], fallbacks=("text-only", "vision-2")),
                     modalities=("text", "image"))
    gw = make_gateway([vision, model("text-only", [backend(engines[1])]),
                       replace(model("vision-2", [backend(engines[2])]),
                               modalities=("text", "image"))])
    engines[0].control(fail_status=503)
    with gw.client() as client:
        resp = client.post("/v1/chat/completions", json=chat_body(messages=_parts(IMAGE)))
    assert resp.status_code == 200, resp.text
    assert engines[1].stats()["requests"] == 0 and engines[2].stats()["requests"] == 1
