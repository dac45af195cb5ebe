"""The guardrail stage: the policy a request's key or model uses, applied to its prompt before
the engine and to the answer after it, and what the request leaves for body logging.

    guard = await guard_request(services, principal, parsed, model)   # None: no policy
    ...                                     # (the pipeline hangs it on the RequestScope)
    result = guard.check_answer(result)     # a JSON answer, masked in place
    stream = guard.wrap(engine_stream)      # a streamed answer (GuardedStream)
    guard.finish(scope)                     # audit line; the usage record's RequestBodies

A request no policy applies to costs one lookup in the snapshot. Each rule match is counted in
`inferplane_guardrail_actions_total{model,rule,action,direction}`; a `block` on the prompt is
a 400 (guardrail_blocked) naming the policy and rule, never the matched text.
"""
from __future__ import annotations

import logging

import orjson
from pydantic import ValidationError

from common.error_codes import ErrorCode
from common.errors import InferplaneError
from common.guardrail_spec import Action, BodyLog, Direction
from common.usage_record import RequestBodies
from gateway.guardrails.guarded_stream import CONTENT_FILTER, GuardedStream
from gateway.guardrails.moderation import moderate
from gateway.guardrails.policy import MAX_PROMPT_CHARS, MODERATION, CompiledPolicy
from gateway.guardrails.texts import answer_texts, prompt_texts


log = logging.getLogger("inferplane.gateway.guardrails")


class GuardrailBlocked(InferplaneError):
    status, code = 400, ErrorCode.GUARDRAIL_BLOCKED


class GuardrailUnavailable(InferplaneError):
    status, code = 503, ErrorCode.GUARDRAIL_UNAVAILABLE


_compiled: dict[str, tuple[object, CompiledPolicy]] = {}   # name → (its view, compiled)


def compiled(view) -> CompiledPolicy:
    """The policy of a snapshot's PolicyView, compiled once per spec: the same view object
    (one snapshot) is a dict lookup; a new snapshot's view is compared by revision and spec
    (a policy deleted and made again restarts its revision)."""
    cached = _compiled.get(view.name)
    if cached is not None:
        seen, policy = cached
        if seen is view:
            return policy
        if seen.revision == view.revision and seen.spec == view.spec:
            _compiled[view.name] = (view, policy)
            return policy
    try:
        policy = CompiledPolicy.of(view.name, dict(view.spec))
    except ValidationError:   # written past the API's validation: refuse, never skip it
        log.exception("guardrail policy %r does not validate", view.name)
        raise GuardrailUnavailable(f"guardrail policy '{view.name}' is not valid; the "
                                   "request was not sent") from None
    _compiled[view.name] = (view, policy)
    return policy


def _key_id(principal) -> int | None:
    raw = principal.key_id
    return int(raw) if raw and raw.isdigit() else None   # JWT principals have no key row


async def guard_request(services, principal, parsed, model: str) -> "RequestGuard | None":
    """The request's guard with its prompt checked (masked in place; GuardrailBlocked,
    GuardrailUnavailable), or None when no policy applies to the key or to `model` (the
    resolved model's name)."""
    view = getattr(services.snapshot, "guardrails", None)
    if not view:
        return None
    policy_view = view.policy_for(model, _key_id(principal))
    if policy_view is None:
        return None
    policy = compiled(policy_view)
    guard = RequestGuard(policy, parsed.model, services.metrics)
    if policy.input:
        await guard.check_prompt(parsed.body)
    elif guard.body_log != BodyLog.OFF:
        guard.request_chars = sum(len(text) for text, _ in prompt_texts(parsed.body))
    if guard.body_log == BodyLog.FULL:
        guard.request_json = orjson.dumps(parsed.body).decode()
    return guard


class RequestGuard:
    __slots__ = ("policy", "model", "metrics", "findings", "body_log", "request_json",
                 "request_chars")

    def __init__(self, policy: CompiledPolicy, model: str, metrics):
        self.policy = policy
        self.model = model
        self.metrics = metrics
        self.findings: dict[tuple[str, str, str], int] = {}   # (rule, action, direction) → n
        self.body_log = policy.spec.body_log
        self.request_json: str | None = None
        self.request_chars = 0

    @property
    def collects_answer(self) -> bool:
        """Whether the answer's text is kept for body logging."""
        return self.body_log == BodyLog.FULL

    # -- counting ------------------------------------------------------------
    def count(self, rule: str, action: str, direction: str) -> None:
        key = (rule, str(action), str(direction))
        self.findings[key] = self.findings.get(key, 0) + 1
        self.metrics.guardrail_actions.labels(self.model, rule, str(action), str(direction)).inc()

    def count_hits(self, redactor, direction: str) -> None:
        """Count a StreamRedactor's matches released so far (once each)."""
        if redactor.hits:
            for rule, action in redactor.hits:
                self.count(rule, action, direction)
            redactor.hits.clear()

    # -- the prompt ----------------------------------------------------------
    async def check_prompt(self, body: dict) -> None:
        spec = self.policy.spec
        texts = list(prompt_texts(body))
        self.request_chars = sum(len(t) for t, _ in texts)
        if spec.max_prompt_chars is not None and self.request_chars > spec.max_prompt_chars:
            self.count(MAX_PROMPT_CHARS, Action.BLOCK, Direction.INPUT)
            raise self._blocked(MAX_PROMPT_CHARS, f" ({self.request_chars} characters, at most "
                                f"{spec.max_prompt_chars})")
        blocked = None
        for text, put in texts:
            scan = self.policy.scan(text)
            for rule, action in scan.hits:
                self.count(rule, action, Direction.INPUT)
            blocked = blocked or scan.blocked
            if scan.masked is not text:
                put(scan.masked)
        if blocked is not None:
            raise self._blocked(blocked)
        if spec.moderation is not None:
            await self._moderate([t for t, _ in prompt_texts(body)])

    async def _moderate(self, texts: list[str]) -> None:
        spec = self.policy.spec.moderation
        verdict = await moderate(spec, texts)
        if verdict.failed:
            self.count(MODERATION, spec.on_error, Direction.INPUT)
            if spec.on_error == "fail_closed":
                self.audit("refused: the moderation endpoint did not answer")
                raise GuardrailUnavailable(
                    f"the moderation check of guardrail policy '{self.policy.name}' did not "
                    "answer; the request was not sent", headers={"Retry-After": "1"})
            return
        if verdict.flagged:
            self.count(MODERATION, Action.BLOCK, Direction.INPUT)
            flagged = f" (flagged: {', '.join(verdict.categories)})" if verdict.categories else ""
            raise self._blocked(MODERATION, flagged)

    def _blocked(self, rule: str, detail: str = "") -> GuardrailBlocked:
        self.audit("blocked")
        return GuardrailBlocked(f"the request was blocked by guardrail policy "
                                f"'{self.policy.name}': rule '{rule}'{detail}", param="messages")

    # -- the answer ----------------------------------------------------------
    def check_answer(self, result: dict) -> dict:
        """A non-streamed engine answer with the output rules applied in place; a blocked
        choice loses its text and finishes with `content_filter`."""
        if not self.policy.output:
            return result
        for choice in result.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            for text, put in answer_texts({"choices": [choice]}):
                scan = self.policy.scan(text)
                for rule, action in scan.hits:
                    self.count(rule, action, Direction.OUTPUT)
                if scan.blocked is not None:
                    put("")
                    choice["finish_reason"] = CONTENT_FILTER
                elif scan.masked is not text:
                    put(scan.masked)
        return result

    def wrap(self, stream):
        """The engine stream the relay reads: output rules applied chunk by chunk."""
        return GuardedStream(stream, self) if self.policy.output else stream

    # -- the end of the request ----------------------------------------------
    def audit(self, outcome: str) -> None:
        """One log line of the rules that matched and what was done (never the text)."""
        if self.findings and log.isEnabledFor(logging.INFO):
            found = ", ".join(f"{rule} {action} {direction} x{n}"
                              for (rule, action, direction), n in self.findings.items())
            log.info(f"guardrail policy '{self.policy.name}': {outcome}; {found}",
                     extra={"model": self.model})

    def finish(self, scope) -> RequestBodies | None:
        """At close (accounting): the audit line, and the body-log record (None when the
        policy logs no bodies)."""
        self.audit("passed")
        if self.body_log == BodyLog.OFF:
            return None
        findings = tuple({"rule": r, "action": a, "direction": d, "count": n}
                         for (r, a, d), n in self.findings.items())
        answer = scope.stats.text() if self.body_log == BodyLog.FULL else None
        limit = self.policy.spec.body_max_chars
        request, request_cut = self._stored(self.request_json, limit)
        response, response_cut = self._stored(answer, limit)
        return RequestBodies(
            mode=str(self.body_log), policy=self.policy.name, request_body=request,
            response_body=response,
            request_chars=len(self.request_json) if self.request_json else self.request_chars,
            response_chars=len(answer) if answer else 0,
            request_truncated=request_cut, response_truncated=response_cut, findings=findings)

    def _stored(self, text: str | None, limit: int) -> tuple[str | None, bool]:
        """(the text redacted and cut to `limit`, whether it was cut). A long body is cut
        before it is scanned (an 8 MB body costs no 8 MB scan), with a margin that is dropped
        again afterwards: an entity the first cut split is never kept in part."""
        if text is None:
            return None, False
        if len(text) <= limit + MARGIN:
            redacted = self.policy.redact(text)
            return (redacted, False) if len(redacted) <= limit else (redacted[:limit], True)
        redacted = self.policy.redact(text[:limit + MARGIN])
        return redacted[:min(limit, max(0, len(redacted) - MARGIN))], True


MARGIN = 4096   # longer than any entity a detector finds (a PEM private key is ~3.3 KB)


def attach(scope, guard: RequestGuard | None) -> None:
    """Hang the guard on the request's scope (its answer's text kept when bodies are logged)."""
    scope.guard = guard
    if guard is not None and guard.collects_answer:
        scope.stats.collect_text()


__all__ = ["GuardrailBlocked", "GuardrailUnavailable", "RequestGuard", "attach", "compiled",
           "guard_request"]
