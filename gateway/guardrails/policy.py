"""A guardrail policy compiled for the request path: its detectors, banned terms and regular
expressions run over one text and say what to mask, what to block and what to only count.

    policy = CompiledPolicy.of("strict", spec)            # once per policy revision (cache.py)
    scan = policy.scan("mail bob@example.com")
    scan.blocked                      # the first blocking rule's name, or None
    scan.masked                       # "mail [EMAIL]" (mask rules applied, log rules not)
    scan.hits                         # [("email", Action.MASK)]: counted per rule
    policy.redact("...")              # every rule masked whatever its action (body logging)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from common.guardrail_spec import Action, Direction, PolicySpec
from gateway.guardrails.detectors import PRECEDENCE, Span, could_hold_pii, find, merge

BANNED_TERM = "banned_term"
MAX_PROMPT_CHARS = "max_prompt_chars"
MODERATION = "moderation"
ALL_PII = PRECEDENCE   # every kind, in the order overlaps are decided


@dataclass(slots=True)
class Scan:
    """What one text held: the rules that matched (with their action), the first blocking
    rule, and the text with the mask rules applied."""
    masked: str
    hits: list[tuple[str, Action]] = field(default_factory=list)
    blocked: str | None = None


def placeholder(rule: str) -> str:
    return f"[{rule.upper()}]"


class CompiledPolicy:
    """Immutable once built; shared by every request of the policy's revision."""
    __slots__ = ("name", "spec", "actions", "pii", "banned", "terms", "regexes", "input",
                 "output")

    def __init__(self, name: str, spec: PolicySpec):
        self.name = name
        self.spec = spec
        self.pii = tuple(k for k in PRECEDENCE if k in spec.pii)
        self.actions: dict[str, Action] = {str(k): a for k, a in spec.pii.items()}
        self.banned = _banned_pattern(spec.banned_terms)
        self.terms = tuple({t.lower() for t in spec.banned_terms})
        if self.banned is not None:
            self.actions[BANNED_TERM] = spec.banned_terms_action
        self.regexes = tuple((r.name, re.compile(r.pattern)) for r in spec.regexes)
        for rule in spec.regexes:
            self.actions[rule.name] = rule.action
        self.input = spec.checks and Direction.INPUT in spec.directions
        self.output = spec.checks and Direction.OUTPUT in spec.directions and bool(
            self.pii or self.banned is not None or self.regexes)

    @classmethod
    def of(cls, name: str, spec: PolicySpec | dict) -> "CompiledPolicy":
        return cls(name, spec if isinstance(spec, PolicySpec) else PolicySpec.model_validate(spec))

    def spans(self, text: str, pii: tuple[str, ...] | None = None) -> list[Span]:
        """Every rule's matches in `text`, overlaps resolved (PII by precedence first)."""
        region = self.spec.phone_region
        found: list[Span] = []
        kinds = self.pii if pii is None else pii
        if kinds and could_hold_pii(text):
            for kind in kinds:   # in PRECEDENCE order
                found += find(kind, text, region, found)
        if self.banned is not None and self._has_term(text):
            found += [Span(m.start(), m.end(), BANNED_TERM) for m in self.banned.finditer(text)]
        for name, pattern in self.regexes:
            found += [Span(m.start(), m.end(), name) for m in pattern.finditer(text)
                      if m.end() > m.start()]
        return merge(found) if found else found

    def _has_term(self, text: str) -> bool:
        """Substring tests (in C) before the word-bounded expression runs."""
        lowered = text.lower()
        return any(term in lowered for term in self.terms)

    def scan(self, text: str) -> Scan:
        spans = self.spans(text)
        if not spans:
            return Scan(text)
        scan = Scan(text)
        masked = []
        for span in spans:
            action = self.actions[span.kind]
            scan.hits.append((span.kind, action))
            if action == Action.BLOCK and scan.blocked is None:
                scan.blocked = span.kind
            if action == Action.MASK:
                masked.append(span)
        scan.masked = apply_masks(text, masked)
        return scan

    def redact(self, text: str) -> str:
        """Every PII kind and every rule of the policy masked, whatever its action: what a
        stored body holds."""
        return apply_masks(text, self.spans(text, ALL_PII))


def apply_masks(text: str, spans: list[Span]) -> str:
    """`text` with each span (sorted, non-overlapping) replaced by its placeholder."""
    if not spans:
        return text
    out, at = [], 0
    for span in spans:
        out.append(text[at:span.start])
        out.append(placeholder(span.kind))
        at = span.end
    out.append(text[at:])
    return "".join(out)


def _banned_pattern(terms: list[str]) -> re.Pattern | None:
    """One alternation of the terms, whole words, case-insensitive (longest first, so a term
    that extends another wins)."""
    if not terms:
        return None
    alternation = "|".join(re.escape(t) for t in sorted(set(terms), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE)


__all__ = ["BANNED_TERM", "MAX_PROMPT_CHARS", "MODERATION", "CompiledPolicy", "Scan",
           "apply_masks", "placeholder"]
