"""Streamed redaction: an entity split across chunks is masked whole; nothing is lost or
duplicated; the hold-back stays bounded."""
from __future__ import annotations

import pytest

from common.guardrail_spec import PiiKind
from gateway.guardrails.policy import CompiledPolicy
from gateway.guardrails.stream_redactor import MAX_HOLD, STEP, WINDOW, StreamRedactor

ALL = CompiledPolicy.of("all", {"pii": {k.value: "mask" for k in PiiKind}})
TEXT = ("Sure. Contact bob.smith@example.com or +1 650-253-0000. Pay card 4111 1111 1111 1111 "
        "to DE89 3704 0044 0532 0130 00 from host 10.20.30.40 using "
        "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 and that is all. " + "Plain words. " * 10)


def stream(redactor: StreamRedactor, text: str, size: int) -> tuple[str, list[str]]:
    pieces = [redactor.feed(text[i:i + size]) for i in range(0, len(text), size)]
    pieces.append(redactor.flush())
    return "".join(pieces), pieces


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16, 50, 1000])
def test_same_as_whole_text_for_any_chunking(size):
    whole = ALL.scan(TEXT).masked
    out, _ = stream(StreamRedactor(ALL), TEXT, size)
    assert out == whole
    for leaked in ("bob.smith", "650-253", "4111 1111", "DE89", "10.20.30", "sk-proj"):
        assert leaked not in out


def test_pem_key_held_until_its_end():
    pem = ("-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * 20
           + "-----END PRIVATE KEY-----")
    out, pieces = stream(StreamRedactor(ALL), f"here: {pem} done", 4)
    assert out == "here: [SECRET] done"
    assert not any("MIIE" in p for p in pieces)


def test_tail_window_bounded():
    r = StreamRedactor(ALL)
    for _ in range(100):
        r.feed("just words ")
        assert len(r.pending) < WINDOW + STEP + len("just words ")
    r.feed("x" * (MAX_HOLD + 10))     # one unbroken run: released, not held without bound
    assert len(r.pending) <= MAX_HOLD


def test_block_reported_and_hits_counted_once():
    p = CompiledPolicy.of("b", {"pii": {"email": "log", "card": "block"}})
    r = StreamRedactor(p)
    out, _ = stream(r, TEXT, 3)
    assert r.blocked == "card"
    assert sorted(r.hits) == [("card", "block"), ("email", "log")]
    assert "bob.smith@example.com" in out   # log: passes
