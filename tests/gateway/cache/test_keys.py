"""Cache keys: canonical requests, what does and does not change the key, tenants."""
from __future__ import annotations

from types import SimpleNamespace

from gateway.cache.keys import canonical, deterministic, last_user_text, request_keys, tenant_of

BODY = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                   {"role": "user", "content": "capital of France?"}],
        "temperature": 0, "max_tokens": 20}


def keys(body=BODY, tenant="team:a", model="m", version="v1", protocol="chat", semantic=True):
    return request_keys(tenant, model, version, protocol, body, semantic)


def test_delivery_fields_and_key_order_do_not_change_the_key():
    same = {"max_tokens": 20, "temperature": 0.0, "user": "u-7", "stream": True,
            "stream_options": {"include_usage": True}, "model": "alias-name",
            "messages": BODY["messages"], "metadata": {"trace": "x"}}
    assert keys(same).exact == keys().exact
    assert canonical(same) == canonical(BODY)


def test_everything_that_changes_the_answer_changes_the_key():
    base = keys().exact
    assert keys({**BODY, "max_tokens": 21}).exact != base
    assert keys({**BODY, "tools": [{"type": "function", "function": {"name": "f"}}]}).exact != base
    assert keys({**BODY, "response_format": {"type": "json_object"}}).exact != base
    assert keys({**BODY, "seed": 1}).exact != base
    assert keys(tenant="team:b").exact != base
    assert keys(tenant="key:1").exact != base
    assert keys(version="v2").exact != base
    assert keys(model="other").exact != base
    assert keys(protocol="chat:stream").exact != base


def test_the_partition_leaves_out_only_the_last_user_message():
    k = keys()
    assert k.text == "capital of France?"
    paraphrase = {**BODY, "messages": [BODY["messages"][0],
                                       {"role": "user", "content": "France's capital city?"}]}
    p = keys(paraphrase)
    assert p.partition == k.partition and p.exact != k.exact
    other_system = {**BODY, "messages": [{"role": "system", "content": "be verbose"},
                                         BODY["messages"][1]]}
    assert keys(other_system).partition != k.partition
    assert keys(tenant="team:b").partition != k.partition
    assert keys(semantic=False).partition is None


def test_only_plain_user_text_is_embedded():
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    assert last_user_text("chat", {"messages": [image]}) is None
    assert last_user_text("chat", {"messages": [{"role": "assistant", "content": "hi"}]}) is None
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                       "text": "b"}]}
    assert last_user_text("chat", {"messages": [parts]})[0] == "a\nb"
    assert last_user_text("completions", {"prompt": "say hi"})[0] == "say hi"
    assert last_user_text("embeddings", {"input": "x"}) is None


def test_deterministic_means_temperature_zero_or_a_seed():
    assert deterministic({"temperature": 0}) and deterministic({"temperature": 0.0})
    assert deterministic({"seed": 0, "temperature": 1})
    assert not deterministic({}) and not deterministic({"temperature": 0.2})


def test_the_tenant_is_the_team_unless_keyed_by_key():
    team_key = SimpleNamespace(team="t", key_id="7")
    loner = SimpleNamespace(team=None, key_id="8")
    assert tenant_of(team_key, "team") == "team:t"
    assert tenant_of(team_key, "key") == "key:7"
    assert tenant_of(loner, "team") == "key:8"
