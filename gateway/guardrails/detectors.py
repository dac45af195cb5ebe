"""PII and secret detectors: each finds candidate spans with a cheap regular expression and
keeps only those a validator accepts (Luhn for cards, the IBAN checksum, a parsable phone
number or IP address), so look-alikes such as order numbers pass untouched.

    for span in find(PiiKind.CARD, "card 4111 1111 1111 1111, thanks"):
        span.start, span.end, span.kind    # 5, 24, PiiKind.CARD

`find_all(kinds, text)` merges the spans of several detectors (earlier and longer first,
overlaps dropped), the order a masker replaces them in.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn

from common.guardrail_spec import PiiKind


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    kind: str     # a PiiKind, or a policy rule's name


# Every expression starts with a literal or a character class (and checks what precedes it
# right after its first character, or in Python): the regex engine then skips ahead to
# candidate positions instead of trying an assertion at every character, 3-50x faster.
EMAIL_DOMAIN = re.compile(r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
# 13-19 digits, optionally grouped by single spaces or dashes
CARD = re.compile(r"\d(?<![\d-]\d)(?:[ -]?\d){12,18}(?!\d)")
IBAN = re.compile(r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]){11,30}\b")
IPV4 = re.compile(r"\d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?![\d.])")
IPV6_TAIL = re.compile(r":[0-9A-Fa-f:]*")      # from the first colon; the head is read back
HEX = frozenset("0123456789abcdefABCDEF")
SECRETS = tuple(re.compile(p) for p in (
    r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )*PRIVATE KEY-----",
    r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}",      # OpenAI / Anthropic style keys
    r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])",  # AWS access key ids
    r"gh[pousr]_[A-Za-z0-9]{36,}",                # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{40,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",             # Slack tokens
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",   # JWTs
))
# A phone number: an optional + or (, then digits with spaces, dots, dashes or parentheses
PHONE = re.compile(r"[+(\d](?<![\w+(][+(\d])[\d ().-]{5,19}\d(?!\w)")


def _card_ok(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn.is_valid(digits)


def _iban_ok(text: str) -> bool:
    return stdnum_iban.is_valid(text)


def _ip_ok(text: str) -> bool:
    if text.count(":") and text.strip(":") == "":
        return False    # "::" alone is no address anybody leaks
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _phone_ok(region: str) -> Callable[[str], bool]:
    def ok(text: str) -> bool:
        digits = sum(c.isdigit() for c in text)
        if digits < 7 or digits > 15:
            return False
        try:
            number = phonenumbers.parse(text, None if text.startswith("+") else region)
        except phonenumbers.NumberParseException:
            return False
        return phonenumbers.is_valid_number(number)
    return ok


def _always(_text: str) -> bool:
    return True


def _matches(pattern: re.Pattern, valid: Callable[[str], bool], kind: str, text: str,
             taken: tuple[Span, ...] | list[Span] = ()) -> Iterator[Span]:
    for match in pattern.finditer(text):
        start, end = match.start(), match.end()
        if any(start < t.end and t.start < end for t in taken):
            continue   # a detector of higher precedence has it: not worth validating
        if valid(match.group()):
            yield Span(start, end, kind)


# Cheap tests that rule a detector out before its expression scans the text (most prose has
# no "@", few digits and no token prefixes): the scans are the cost of a policy.
DIGIT = re.compile(r"\d")
SECRET_HINT = re.compile(r"sk-|AKIA|ASIA|gh[pousr]_|github_pat_|xox|eyJ|-----BEGIN")


# What every PII kind needs somewhere in the text (a digit, an "@", a hex digit beside a colon
# for IPv6, or a secret's prefix): one search rules all detectors out for most prose, which
# is what a streamed answer's many short rescans mostly are.
ANY_HINT = re.compile(r"[\d@]|[0-9A-Fa-f]:[0-9A-Fa-f:]|" + SECRET_HINT.pattern)


def could_hold_pii(text: str) -> bool:
    return ANY_HINT.search(text) is not None


def _ruled_out(kind: str, text: str) -> bool:
    if kind == PiiKind.EMAIL:
        return "@" not in text
    if kind == PiiKind.SECRET:
        return SECRET_HINT.search(text) is None
    return DIGIT.search(text) is None   # cards, IBANs, phone numbers and addresses have digits


def find(kind: str, text: str, region: str = "US",
         taken: tuple[Span, ...] | list[Span] = ()) -> Iterator[Span]:
    """The validated spans of one detector in `text` (candidates overlapping `taken`, the
    spans of detectors before it in PRECEDENCE, are not validated)."""
    if _ruled_out(kind, text):
        return iter(())
    if kind == PiiKind.EMAIL:
        return _emails(text)
    if kind == PiiKind.CARD:
        return _matches(CARD, _card_ok, kind, text)
    if kind == PiiKind.IBAN:
        return _matches(IBAN, _iban_ok, kind, text)
    if kind == PiiKind.SECRET:
        return _secrets(text)
    if kind == PiiKind.IP:
        return _ips(text)
    if kind == PiiKind.PHONE:
        return _matches(PHONE, _phone_ok(region), kind, text, taken)
    raise ValueError(f"unknown detector {kind!r}")


def _emails(text: str) -> Iterator[Span]:
    for match in EMAIL_DOMAIN.finditer(text):
        start = match.start()
        while start > 0 and text[start - 1] in EMAIL_LOCAL:
            start -= 1
        if start < match.start():
            yield Span(start, match.end(), PiiKind.EMAIL)


def _secrets(text: str) -> Iterator[Span]:
    for pattern in SECRETS:
        for match in pattern.finditer(text):
            start = match.start()
            if start == 0 or not text[start - 1].isalnum():   # a word of its own
                yield Span(start, match.end(), PiiKind.SECRET)


def _ips(text: str) -> Iterator[Span]:
    if "." in text:
        yield from _matches(IPV4, _ip_ok, PiiKind.IP, text)
    if ":" in text:
        yield from _ipv6(text)


def _ipv6(text: str) -> Iterator[Span]:
    for match in IPV6_TAIL.finditer(text):
        start, end = match.start(), match.end()
        while start > 0 and match.start() - start < 4 and text[start - 1] in HEX:
            start -= 1
        before = text[start - 1] if start else " "
        if before in HEX or before == ":" or (end < len(text) and text[end].isalnum()):
            continue
        if text[end - 1] == ":" and not text[start:end].endswith("::"):
            end -= 1   # a sentence's colon after an address
        if _ip_ok(text[start:end]):
            yield Span(start, end, PiiKind.IP)


# Order of precedence where two detectors claim overlapping text: a card number also parses
# as a phone number, a secret may contain digits; the more specific wins.
PRECEDENCE = (PiiKind.SECRET, PiiKind.EMAIL, PiiKind.IBAN, PiiKind.CARD, PiiKind.IP,
              PiiKind.PHONE)


def merge(spans: Iterable[Span]) -> list[Span]:
    """Spans sorted by start, overlaps dropped (the span found first, by precedence, wins)."""
    kept: list[Span] = []
    for span in spans:
        if not any(span.start < k.end and k.start < span.end for k in kept):
            kept.append(span)
    kept.sort(key=lambda s: s.start)
    return kept


def find_all(kinds: Iterable[str], text: str, region: str = "US") -> list[Span]:
    """Every detector of `kinds` over `text`, merged (see `merge`)."""
    wanted = set(kinds)
    found: list[Span] = []
    for kind in PRECEDENCE:
        if kind in wanted:
            found += find(kind, text, region, found)
    return merge(found)


__all__ = ["PRECEDENCE", "Span", "could_hold_pii", "find", "find_all", "merge"]
