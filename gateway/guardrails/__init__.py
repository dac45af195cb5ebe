"""Guardrails: PII, secrets, banned terms, regular expressions, prompt size and an external
moderation hook, applied to prompts and answers by the policy bound to a request's key or
model (registry snapshot), and what a request leaves for body logging.

    request_guard   the stage: guard_request, RequestGuard (prompt, answer, stream, bodies)
    policy          a policy compiled for the request path (scan, redact)
    detectors       the PII and secret finders with their validators
    stream_redactor redaction of text arriving in chunks (a held-back tail)
    guarded_stream  an engine stream with the output rules applied, event by event
    moderation      the POST /v1/moderations hook
    texts           the texts of an engine body or answer, written back in place
"""
