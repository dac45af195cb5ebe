"""Redaction of text that arrives in pieces (a streamed answer): a small tail is held back so
an entity split across chunks is still seen whole before any of it is sent.

    redactor = StreamRedactor(policy)
    redactor.feed("mail me at bob@exa")   # "mail me at " or less: the tail waits
    redactor.feed("mple.com today")       # ...
    redactor.flush()                      # the rest, masked: "... [EMAIL] today"
    redactor.blocked                      # the first blocking rule seen, or None
    redactor.hits                         # [(rule, action)] of the text released so far

Held back: the last `window` characters (released `STEP` at a time), a match still touching
them (it may grow), a token that looks like the start of a secret (sk-, ghp_, eyJ...) and an
unfinished PEM private key block; never more than `MAX_HOLD` characters, past which text is
released as it stands.
"""
from __future__ import annotations

import re

from common.guardrail_spec import Action
from gateway.guardrails.policy import CompiledPolicy, apply_masks

WINDOW = 64           # longer than a phone, card or IBAN written out and most emails
STEP = 32             # text is rescanned once this much more arrived, not on every chunk
MAX_HOLD = 16_384     # a PEM key is ~1.7-3.3 KB; past this the stream is not held any longer
SECRET_START = re.compile(r"(?:sk-|AKIA|ASIA|gh[pousr]_|github_pat_|xox[abposr]-|eyJ)"
                          r"[A-Za-z0-9_.\-]*\Z")
PEM_BEGIN = "-----BEGIN"
PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY-----")


class StreamRedactor:
    __slots__ = ("policy", "window", "pending", "hits", "blocked")

    def __init__(self, policy: CompiledPolicy, window: int = WINDOW):
        self.policy = policy
        self.window = window
        self.pending = ""
        self.hits: list[tuple[str, Action]] = []
        self.blocked: str | None = None

    def feed(self, text: str) -> str:
        """The part of everything fed so far that can be sent now, masked."""
        if text:
            self.pending += text
        if len(self.pending) < self.window + STEP:
            return ""
        return self._release(final=len(self.pending) > MAX_HOLD)

    def flush(self) -> str:
        """Everything still held, masked (the stream ended)."""
        return self._release(final=True) if self.pending else ""

    def _release(self, final: bool) -> str:
        text = self.pending
        spans = self.policy.spans(text)
        cut = len(text) if final else self._safe_cut(text, spans)
        if cut <= 0:
            return ""
        released, masks = text[:cut], []
        for span in spans:
            if span.end > cut:
                continue
            action = self.policy.actions[span.kind]
            self.hits.append((span.kind, action))
            if action == Action.BLOCK and self.blocked is None:
                self.blocked = span.kind
            elif action == Action.MASK:
                masks.append(span)
        self.pending = text[cut:]
        return apply_masks(released, masks)

    def _safe_cut(self, text: str, spans) -> int:
        cut = len(text) - self.window
        for span in spans:           # a match reaching into the held tail may still grow
            if span.start < cut < span.end or (span.start < cut and span.end == len(text)):
                cut = span.start
        begin = text.rfind(PEM_BEGIN)
        if 0 <= begin < cut and PEM_END.search(text, begin) is None:
            cut = begin
        running = SECRET_START.search(text, max(0, cut - 200))
        if running is not None and running.start() < cut:
            cut = running.start()
        return cut


__all__ = ["MAX_HOLD", "WINDOW", "StreamRedactor"]
