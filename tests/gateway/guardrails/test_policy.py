"""A compiled policy: mask, block and log per rule; banned terms and regular expressions;
the body-log redaction masks every kind whatever the action; the spec refuses bad input."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.guardrail_spec import GuardrailSettings, PolicySpec
from gateway.guardrails.policy import CompiledPolicy


def policy(**spec) -> CompiledPolicy:
    return CompiledPolicy.of("p", spec)


def test_mask_replaces_with_placeholders():
    scan = policy(pii={"email": "mask", "card": "mask"}).scan(
        "mail bob@example.com, card 4111 1111 1111 1111.")
    assert scan.masked == "mail [EMAIL], card [CARD]."
    assert scan.blocked is None
    assert sorted(scan.hits) == [("card", "mask"), ("email", "mask")]


def test_block_names_the_rule():
    scan = policy(pii={"email": "mask", "iban": "block"}).scan(
        "to DE89 3704 0044 0532 0130 00 from bob@example.com")
    assert scan.blocked == "iban"


def test_log_counts_and_passes():
    text = "call +1 650-253-0000"
    scan = policy(pii={"phone": "log"}).scan(text)
    assert scan.masked == text and scan.blocked is None and scan.hits == [("phone", "log")]


def test_banned_terms_whole_words_case_insensitive():
    p = policy(banned_terms=["project falcon", "acme"], banned_terms_action="mask")
    assert p.scan("About Project FALCON at ACME, not acmes").masked == \
        "About [BANNED_TERM] at [BANNED_TERM], not acmes"


def test_regex_rules():
    p = policy(regexes=[{"name": "ticket", "pattern": r"TCK-\d{4}", "action": "mask"},
                        {"name": "codename", "pattern": r"(?i)blue\s*bird"}])
    assert p.scan("see TCK-1234").masked == "see [TICKET]"
    assert p.scan("the Blue Bird plan").blocked == "codename"


def test_redact_masks_everything_whatever_the_action():
    p = policy(pii={"email": "log"}, banned_terms=["acme"], banned_terms_action="log")
    assert p.redact("bob@example.com at acme, key AKIAIOSFODNN7EXAMPLE") == \
        "[EMAIL] at [BANNED_TERM], key [SECRET]"


def test_directions():
    assert policy(pii={"email": "mask"}, directions=["input"]).output is False
    assert policy(pii={"email": "mask"}, directions=["output"]).input is False
    only_logs = policy(body_log="full")
    assert only_logs.input is False and only_logs.output is False


@pytest.mark.parametrize("spec", [{"pii": {"emails": "mask"}}, {"pii": {"email": "drop"}},
                                  {"regexes": [{"name": "x", "pattern": "("}]},
                                  {"max_prompt_chars": 0}, {"unknown": 1},
                                  {"moderation": {"url": "ftp://x"}}])
def test_bad_specs_refused(spec):
    with pytest.raises(ValidationError):
        PolicySpec.model_validate(spec)


def test_settings_bindings_name_existing_policies():
    with pytest.raises(ValidationError, match="no policy named 'nope'"):
        GuardrailSettings.model_validate({"policies": {"a": {}}, "models": {"m": "nope"}})
