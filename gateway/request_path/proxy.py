"""The route, call and relay stages: pick a backend, call its engine (retry on another backend,
then fallback models, while nothing was sent), and hand the answer to the relay.

    return await dispatch(request, services, call, model_view, version)   # gateway/request_path/pipeline.py
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response

from common.error_codes import ErrorCode, UpstreamErrorKind
from common.errors import OpenAIError, error_from_upstream
from common.tracing import child_span
from engine_adapter.base import EngineError
from gateway.apis.endpoint import EngineProtocol, ParsedRequest
from gateway.observability.upstream_trace import UpstreamTrace
from gateway.request_path.accounting import CLIENT_CLOSED
from gateway.request_path.disconnect_watch import DisconnectWatch
from gateway.request_path.modalities import accepts
from gateway.request_path.relay import finish_json, relay_stream
from gateway.request_path.request_scope import RequestScope
from gateway.request_path.resolve import fallback_views
from gateway.request_path.resume import continuation_body, may_resume
from gateway.request_path.sse_response import SSEResponse
from gateway.routing import RouteContext
from gateway.services import GatewayServices

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before the answer started."""


@dataclass(slots=True)
class Call:
    """The hand-off to the route and call stages: what to send, and the scope it runs in."""
    protocol: EngineProtocol
    parsed: ParsedRequest
    adapter: str | None       # LoRA adapter, sent as the model name
    ctx: RouteContext
    scope: RequestScope

    @property
    def body(self) -> dict:
        return self.parsed.body


def has_candidates(services: GatewayServices, snapshot, model_view, version,
                   principal) -> bool:
    return any(services.router.candidates(backends)
               for _, backends, _ in _attempt_plan(snapshot, model_view, version, principal))


def _attempt_plan(snapshot, model_view, version, principal):
    """The primary model (pinned version) then each fallback model the key may use."""
    yield model_view, model_view.backends_for(version), False
    for fallback in fallback_views(snapshot, model_view, principal):
        yield fallback, fallback.backends, True


async def dispatch(request: Request, services: GatewayServices, call: Call, model_view,
                   version) -> Response:
    """Route and call: each backend of the plan in turn until one answers; the Response."""
    last_error: EngineError | None = None
    m = services.metrics
    scope = call.scope
    requested = scope.requested
    plan = ((target, backends, is_fallback) for target, backends, is_fallback
            in _attempt_plan(services.snapshot, model_view, version, scope.principal)
            if not is_fallback or accepts(call.protocol, call.body, target))
    scope.hold_backends()
    for target, backends, is_fallback in plan:
        if is_fallback:
            call.ctx.token_ids = None    # another model: another tokenizer and cache
        tried: set[str] = set()
        for attempt in range(services.settings.retries + 1):
            backend = _route(services, call, target, backends, tried)
            if backend is None:
                break
            if attempt:
                m.retries.labels(requested).inc()
            elif is_fallback:
                m.fallbacks.labels(requested).inc()
            tried.add(backend.id)
            try:
                return await _try_backend(request, services, call, target, backend, attempt,
                                          backends, tried)
            except EngineError as exc:
                scope.upstream_error(backend, exc.kind)
                if not exc.retryable:
                    raise error_from_upstream(exc.status or 400, exc.body) from None
                last_error = exc
    if last_error is None:
        m.rejections.labels(requested, "no_backend").inc()
        raise OpenAIError(503, f"no ready backend for model '{requested}'",
                          code=ErrorCode.NO_READY_BACKEND)
    status = 504 if last_error.kind in (UpstreamErrorKind.TIMEOUT, UpstreamErrorKind.FIRST_TOKEN_TIMEOUT) else 502
    raise OpenAIError(status, f"all backends failed: {last_error.message}",
                      code=last_error.kind)


def _route(services: GatewayServices, call: Call, target, backends, tried: set[str]):
    pool = services.admission_pool(target)
    with child_span("gateway.route", {"inferplane.model": target.name}) as span:
        backend = services.router.pick(target, backends, call.ctx, tried, pool.has_room)
        if backend is not None:
            span.set_attribute("inferplane.backend", backend.id)
            span.set_attribute("inferplane.prefix_matched_blocks", call.ctx.prefix_matched)
    return backend


async def _call_backend(services: GatewayServices, call: Call, model_view, backend,
                        body: dict, attempt: int):
    """Start `body` on `backend` (breaker permit, in-flight count, trace span, all held by
    the scope); the engine's result, or EngineError."""
    permit = services.breaker.get(backend.id).try_acquire()
    if permit is None:  # lost the race for a half-open probe
        raise EngineError(UpstreamErrorKind.BREAKER_OPEN, f"backend {backend.id} is not accepting requests")
    adapter = services.adapters.get(backend)
    upstream = call.protocol.upstream_body(body, call.adapter or backend.served_model,
                                           call.parsed.stream)
    scope = call.scope
    scope.unbind()
    scope.bind(model_view, backend, permit)
    span = scope.upstream = UpstreamTrace(backend, attempt)
    try:
        with span.sending():
            return await call.protocol.call(adapter, upstream)
    except EngineError as exc:
        span.fail(exc.kind, exc.message)
        scope.unbind()
        raise
    except BaseException:
        span.end(CLIENT_CLOSED)
        scope.unbind()
        raise


def _rename(call: Call, backend) -> tuple[bytes, bytes] | None:
    served = call.adapter or backend.served_model
    requested = call.parsed.model
    return None if served == requested else (
        f'"model":"{served}"'.encode(), f'"model":"{requested}"'.encode())


async def _try_backend(request: Request, services: GatewayServices, call: Call, model_view,
                       backend, attempt: int = 0, backends=(), tried=None) -> Response:
    result = await _race_disconnect(request, _call_backend(services, call, model_view, backend,
                                                           call.body, attempt))
    scope = call.scope
    endpoint = scope.endpoint
    if call.parsed.stream:
        scope.upstream.streaming()
        scope.upstream_ok()   # the engine produced a first token: count it healthy
        scope.stats.first_token()
        if scope.guard is not None:   # output guardrails: the relay reads the masked stream
            result = scope.guard.wrap(result)
        scope.engine_stream = result
        resume = None
        if may_resume(services.settings.resume_streams, call.protocol, call.body):
            resume = Resumer(services, call, model_view, backends, tried or {backend.id})
        events = endpoint.stream_events(call.parsed)
        return SSEResponse(relay_stream(result, scope, call.parsed.include_usage,
                                        _rename(call, backend), resume, events),
                           headers=SSE_HEADERS, scope=scope)
    if scope.guard is not None:
        result = scope.guard.check_answer(result)
    content = finish_json(result, scope, call.protocol.result_text)
    scope.upstream_ok()
    await scope.close(200)
    return Response(content, media_type="application/json")


@dataclass(slots=True)
class Resumer:
    """The relay's way to continue a broken stream on another backend of the same version:
    `await resumer(sent_text, sent_tokens, error)` → (stream, rename) or None."""
    services: GatewayServices
    call: Call
    model_view: object
    backends: object
    tried: set[str]

    async def __call__(self, sent_text: str, sent_tokens: int, error: EngineError):
        call, services = self.call, self.services
        body = continuation_body(call.protocol, call.body, sent_text, sent_tokens)
        if body is None:
            return None
        candidates = [b for b in self.backends if call.protocol.can_continue(b)]
        for attempt in range(1, services.settings.retries + 1):
            backend = services.router.pick(self.model_view, candidates, call.ctx, self.tried)
            if backend is None:
                return None
            self.tried.add(backend.id)
            try:
                stream = await _call_backend(services, call, self.model_view, backend, body,
                                             attempt)
            except EngineError as exc:
                call.scope.upstream_error(backend, exc.kind)
                continue
            if call.scope.guard is not None:
                stream = call.scope.guard.wrap(stream)
            call.scope.upstream.streaming()
            call.scope.upstream_ok()
            services.metrics.stream_resumes.labels(call.scope.requested, error.kind).inc()
            return stream, _rename(call, backend)
        return None


async def _race_disconnect(request: Request, work):
    """Await `work` in this task, abandoning it (and so aborting upstream) if the client goes
    away first: ClientGone then. A cancel from elsewhere (server shutdown) propagates."""
    watch = DisconnectWatch(request.receive)
    try:
        return await work
    except asyncio.CancelledError:
        if not watch.gone:
            raise
        watch.task.uncancel()   # our own cancel, not the server's: the handler goes on
        raise ClientGone() from None
    finally:
        watch.stop()
