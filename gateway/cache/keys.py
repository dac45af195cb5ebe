"""What a cached answer is keyed on: who asks (the tenant), the model and version that would
answer, and the request itself in canonical form (sorted keys, fields that do not change the
answer left out), hashed with xxh3-128.

    tenant = tenant_of(principal, "team")          # the key's team, else the key itself
    keys = request_keys(tenant, "m", "v2", "chat", body, semantic=True)
    keys.exact          # "3f9c…": identical requests share it
    keys.partition      # the same, without the last user message: the semantic neighbourhood
    keys.text           # that message, embedded for the semantic lookup (None: nothing to embed)

The version is the one the split stage chose, so moving an alias to another version (or a
rollout's candidate answering) looks up other entries: the old answers age out by TTL/LRU.
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson
import xxhash

# Fields that change how the answer is delivered or recorded, not what it says.
IGNORED = frozenset({"model", "stream", "stream_options", "user", "metadata", "store",
                     "service_tier"})
SEPARATOR = b"\x1f"


@dataclass(frozen=True, slots=True)
class RequestKeys:
    exact: str
    partition: str | None   # None: the request has no last user message to compare
    text: str | None


def tenant_of(principal, scope: str) -> str:
    """Whose answers a request may see: "team:<name>" (keys without a team: "key:<id>")."""
    if scope == "team" and principal.team:
        return "team:" + principal.team
    return "key:" + str(principal.key_id)


def deterministic(body: dict) -> bool:
    """Temperature 0 or a seed: the same request should get the same answer."""
    return body.get("temperature") == 0 or body.get("seed") is not None


def canonical(body: dict) -> bytes:
    """The body as sorted-key JSON without the delivery fields; 0.0 and 0 read the same."""
    out = {}
    for key, value in body.items():
        if key in IGNORED:
            continue
        if type(value) is float and value.is_integer():
            value = int(value)
        out[key] = value
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


def _digest(tenant: str, model: str, version: str, protocol: str, body: bytes) -> str:
    head = SEPARATOR.join(s.encode() for s in (tenant, model, version, protocol))
    return xxhash.xxh3_128_hexdigest(head + SEPARATOR + body)


def last_user_text(protocol: str, body: dict) -> tuple[str, dict] | None:
    """(the text a semantic lookup embeds, the body without it), or None when the request
    does not end with a plain-text user message (chat) or has no string prompt (completions)."""
    if protocol == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        last = messages[-1]
        if not isinstance(last, dict) or last.get("role") != "user":
            return None
        content = last.get("content")
        if isinstance(content, list):   # text parts only: an image is not compared by words
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                return None
            content = "\n".join(str(p.get("text") or "") for p in content)
        if not isinstance(content, str) or not content.strip():
            return None
        return content, {**body, "messages": [*messages[:-1], {"role": "user"}]}
    if protocol == "completions" and isinstance(body.get("prompt"), str) and body["prompt"]:
        return body["prompt"], {**body, "prompt": None}
    return None


def request_keys(tenant: str, model: str, version: str, protocol: str, body: dict,
                 semantic: bool) -> RequestKeys:
    exact = _digest(tenant, model, version, protocol, canonical(body))
    split = last_user_text(protocol, body) if semantic else None
    if split is None:
        return RequestKeys(exact, None, None)
    text, rest = split
    return RequestKeys(exact, _digest(tenant, model, version, protocol, canonical(rest)), text)


__all__ = ["RequestKeys", "canonical", "deterministic", "last_user_text", "request_keys",
           "tenant_of"]
