"""Each PII detector keeps what its validator accepts and nothing else."""
from __future__ import annotations

import pytest

from common.guardrail_spec import PiiKind
from gateway.guardrails.detectors import find, find_all


def found(kind: str, text: str, region: str = "US") -> list[str]:
    return [text[s.start:s.end] for s in find(kind, text, region)]


@pytest.mark.parametrize("text", ["bob@example.com", "first.last+tag@mail.example.co.uk"])
def test_emails(text):
    assert found(PiiKind.EMAIL, f"write to {text}, please") == [text]


def test_not_an_email():
    assert found(PiiKind.EMAIL, "user@localhost and @handle and a@b") == []


@pytest.mark.parametrize("number", ["4111 1111 1111 1111", "4111-1111-1111-1111",
                                    "5500005555555559", "378282246310005"])
def test_luhn_valid_cards(number):
    assert found(PiiKind.CARD, f"card {number} exp 12/29") == [number]


@pytest.mark.parametrize("number", ["4111 1111 1111 1112", "5500005555555558",
                                    "1234567890123"])
def test_luhn_invalid_cards_pass(number):
    assert found(PiiKind.CARD, f"order {number}") == []


@pytest.mark.parametrize("iban", ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432",
                                  "FR1420041010050500013M02606"])
def test_valid_ibans(iban):
    assert found(PiiKind.IBAN, f"pay to {iban} today") == [iban]


@pytest.mark.parametrize("iban", ["DE89 3704 0044 0532 0130 01", "GB82WEST12345698765433"])
def test_checksum_broken_ibans_pass(iban):
    assert found(PiiKind.IBAN, f"pay to {iban} today") == []


@pytest.mark.parametrize("text,region", [("+1 650-253-0000", "US"), ("(415) 555-2671", "US"),
                                         ("+44 20 7946 0958", "US"), ("030 901820", "DE")])
def test_phone_numbers(text, region):
    assert found(PiiKind.PHONE, f"call {text} now", region) == [text]


@pytest.mark.parametrize("text", ["call 12345 now", "version 2024.10.1", "at 12:30:45"])
def test_not_phone_numbers(text):
    assert found(PiiKind.PHONE, text) == []


def test_ip_addresses_validated():
    text = "hosts 10.0.0.1, 2001:db8::1 and fe80::1; not 999.1.1.1 or 12:30:45 or 1.2.3"
    assert found(PiiKind.IP, text) == ["10.0.0.1", "2001:db8::1", "fe80::1"]


@pytest.mark.parametrize("secret", [
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ",
    "xoxb-123456789012-abcdefghijkl",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
])
def test_secrets(secret):
    assert found(PiiKind.SECRET, f"token: {secret} (do not share)") == [secret]


def test_not_secrets():
    assert found(PiiKind.SECRET, "the task-list and a sk-short key, AKIA alone") == []


def test_overlaps_resolved_by_precedence():
    # a card number also parses as digits of a phone number: the card wins, once
    text = "card 4111111111111111 and mail ann@example.org"
    spans = find_all(list(PiiKind), text)
    assert [(s.kind, text[s.start:s.end]) for s in spans] == [
        ("card", "4111111111111111"), ("email", "ann@example.org")]
