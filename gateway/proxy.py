"""The request path behind /v1/chat/completions and /v1/completions.

parse → resolve model → allowlist → limits → version split → route → call engine (retry on
another backend, then fallback models, while nothing was sent) → relay.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response

from engine_adapter.base import EngineError
from gateway.accounting import CLIENT_CLOSED, Accounting
from gateway.admission import QueueFull, QueueTimeout
from gateway.errors import OpenAIError, error_from_upstream
from gateway.modalities import accepts, check_content
from gateway.relay import chat_text, completion_text, finish_json, relay_stream
from gateway.resolve import check_access, choose_version, fallback_views, resolve_model
from gateway.resume import can_continue, continuation_body, may_resume
from gateway.routing import RouteContext
from gateway.routing.precise import tokenize_for_routing
from gateway.shadow import start_shadows
from gateway.sse_response import SSEResponse
from gateway.tracing import child_span
from gateway.upstream_trace import UpstreamTrace
from gateway.schemas import ChatCompletionRequest, CompletionRequest, parse_body, \
    requested_max_tokens
from gateway.state import GatewayState

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class ClientGone(Exception):
    """The client disconnected before the answer started."""


@dataclass
class Call:
    kind: str                 # "chat" | "completions"
    body: dict                # the client's JSON, forwarded with few changes
    requested: str
    stream: bool
    client_wants_usage: bool
    adapter: str | None
    ctx: RouteContext
    acct: Accounting


def _prompt_text(kind: str, body: dict) -> str:
    if kind == "completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else (
            "".join(prompt) if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)
            else "")
    parts = []
    for m in body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
        parts.append(f"{m.get('role')}\n{content or ''}\n")
    return "".join(parts)


def _check_access(principal, req, model_view) -> None:
    check_access(principal, req.model, model_view)


def _validate(req, model_view) -> None:
    if req.n > 1:
        raise OpenAIError(400, "n > 1 is not supported: send n separate requests", param="n",
                          code="unsupported_value")
    max_tokens = requested_max_tokens(req)
    context = model_view.context_length
    if max_tokens is not None and context and max_tokens > context:
        param = "max_completion_tokens" if getattr(req, "max_completion_tokens", None) \
            else "max_tokens"
        raise OpenAIError(400, f"{param}={max_tokens} exceeds the model's context length "
                          f"({context} tokens)", param=param, code="context_length_exceeded")


async def proxy_request(request: Request, principal, kind: str) -> Response:
    state: GatewayState = request.app.state.gateway
    started = time.perf_counter()
    raw = await request.body()
    if len(raw) > state.settings.max_body_bytes:
        raise OpenAIError(413, "request body too large", code="body_too_large")
    schema = ChatCompletionRequest if kind == "chat" else CompletionRequest
    body, req = parse_body(raw, schema)
    snapshot = state.snapshot
    model_view, version, adapter = resolve_model(snapshot, req.model)
    gate = state.limits
    try:
        _check_access(principal, req, model_view)
        if state.cold_starter is not None:   # only requests the key may make count as activity
            state.cold_starter.note_request(model_view.name)
        _validate(req, model_view)
        check_content(kind, body, model_view)
        prompt_tokens = gate.prompt_tokens(kind, body)
        with child_span("gateway.limits"):
            decision, hold = await gate.admit(principal, snapshot, model_view, prompt_tokens,
                                                 requested_max_tokens(req))
    except OpenAIError as exc:   # refused before accounting starts: still a client response
        state.metrics.requests.labels(req.model, "none", str(exc.status)).inc()
        raise
    session = request.headers.get(state.settings.routing.session_header) or req.user
    ctx = RouteContext(model=model_view.name, prompt_text=_prompt_text(kind, body),
                       session_key=session, adapter=adapter)
    acct = Accounting(state, principal, req.model, req.stream, started, prompt_tokens)
    acct.on_finish.append(lambda a: gate.settle(decision, hold, sum(a.tokens()),
                                                a.cost(*a.tokens())))
    call = Call(kind, body, req.model, req.stream,
                bool(req.stream_options and req.stream_options.include_usage), adapter, ctx, acct)
    version = version or choose_version(model_view, session)
    # Count the request for the version the split chose from now on: a refusal before any
    # backend is bound (its breaker open, no ready backend, queue full) is that version's
    # failure. Labelled "none", a failing canary's refusals would vanish from its metrics.
    acct.version = version or "none"
    try:
        snapshot, model_view = await _ready_backends(state, call, snapshot, model_view, version)
        with child_span("gateway.queue"):
            await _admit(state, call, model_view, principal, prompt_tokens + (
                requested_max_tokens(req) or 0))
        start_shadows(state, call, model_view, version)
        with child_span("gateway.tokenize"):
            await tokenize_for_routing(state, call, model_view, model_view.backends_for(version))
        return await _dispatch(request, state, call, model_view, version)
    except OpenAIError as exc:
        acct.finish(exc.status)
        raise
    except ClientGone:
        acct.finish(CLIENT_CLOSED)
        return Response(status_code=CLIENT_CLOSED)
    except BaseException:
        acct.finish(500)
        raise


def _has_candidates(state: GatewayState, snapshot, model_view, version, principal) -> bool:
    return any(state.router.candidates(backends)
               for _, backends, _ in _attempt_plan(snapshot, model_view, version, principal))


async def _ready_backends(state: GatewayState, call: Call, snapshot, model_view, version):
    """(snapshot, model_view) with a routable backend; a cold model (or an adapter nobody holds)
    is started through the control plane and the request held within the cold-start budget."""
    if _has_candidates(state, snapshot, model_view, version, call.acct.principal):
        return snapshot, model_view
    starter = state.cold_starter
    if starter is not None and (model_view.tier in ("cold", "warm") or call.adapter):
        budget = state.settings.admission.cold_start_budget_s
        with child_span("gateway.cold_start"):
            if await starter.ensure_backend(model_view.name, budget, adapter=call.adapter):
                snapshot = state.snapshot
                model_view = snapshot.models.get(model_view.name, model_view)
                if _has_candidates(state, snapshot, model_view, version, call.acct.principal):
                    return snapshot, model_view
        state.metrics.rejections.labels(call.requested, "cold_start_timeout").inc()
        raise OpenAIError(503, f"model '{call.requested}' did not start within {budget:.0f}s",
                          code="cold_start_timeout", headers={"Retry-After": "5"})
    state.metrics.rejections.labels(call.requested, "no_backend").inc()
    raise OpenAIError(503, f"no ready backend for model '{call.requested}'",
                      code="no_ready_backend")


PRIORITIES = ("high", "standard", "batch")


async def _admit(state: GatewayState, call: Call, model_view, principal, cost: int) -> None:
    """Wait for an admission slot (weighted fair queue); 429 when full, 503 on timeout."""
    pool = state.admission_pool(model_view)
    priority = principal.priority if principal.priority in PRIORITIES else "standard"
    admit = pool.admit(tenant=principal.team or principal.key_id, priority=priority,
                       cost=max(1, cost))
    try:
        call.acct.ticket = await admit.__aenter__()
    except QueueFull as exc:
        raise OpenAIError(429, f"too many queued requests for '{call.requested}'",
                          type="rate_limit_error", code="queue_full",
                          headers={"retry-after": str(max(1, round(exc.retry_after)))})
    except QueueTimeout as exc:
        raise OpenAIError(503, f"timed out waiting for capacity on '{call.requested}'",
                          code="queue_timeout",
                          headers={"retry-after": str(max(1, round(exc.retry_after)))})
    # The slot outlives this handler when streaming: release it when accounting finishes.
    call.acct.on_finish.append(lambda _: asyncio.ensure_future(admit.__aexit__(None, None, None)))


def _attempt_plan(snapshot, model_view, version, principal):
    """The primary model (pinned version) then each fallback model the key may use."""
    yield model_view, model_view.backends_for(version), False
    for fallback in fallback_views(snapshot, model_view, principal):
        yield fallback, fallback.backends, True


async def _dispatch(request: Request, state: GatewayState, call: Call, model_view,
                    version) -> Response:
    last_error: EngineError | None = None
    m = state.metrics
    plan = ((target, backends, is_fallback) for target, backends, is_fallback
            in _attempt_plan(state.snapshot, model_view, version, call.acct.principal)
            if not is_fallback or accepts(call.kind, call.body, target))
    for target, backends, is_fallback in plan:
        if is_fallback:
            call.ctx.token_ids = None    # another model: another tokenizer and cache
        tried: set[str] = set()
        for attempt in range(state.settings.retries + 1):
            pool = state.admission_pool(target)
            with child_span("gateway.route", {"inferplane.model": target.name}) as span:
                backend = state.router.pick(target, backends, call.ctx, tried, pool.has_room)
                if backend is not None:
                    span.set_attribute("inferplane.backend", backend.id)
                    span.set_attribute("inferplane.prefix_matched_blocks",
                                       call.ctx.prefix_matched)
            if backend is None:
                break
            if attempt:
                m.retries.labels(call.requested).inc()
            elif is_fallback:
                m.fallbacks.labels(call.requested).inc()
            tried.add(backend.id)
            try:
                return await _try_backend(request, state, call, target, backend, attempt,
                                          backends, tried)
            except EngineError as exc:
                call.acct.upstream_error(backend, exc.kind)
                if not exc.retryable:
                    raise error_from_upstream(exc.status or 400, exc.body) from None
                last_error = exc
    if last_error is None:
        state.metrics.rejections.labels(call.requested, "no_backend").inc()
        raise OpenAIError(503, f"no ready backend for model '{call.requested}'",
                          code="no_ready_backend")
    status = 504 if last_error.kind in ("timeout", "first_token_timeout") else 502
    raise OpenAIError(status, f"all backends failed: {last_error.message}",
                      code=last_error.kind)


def _upstream_body(call: Call, backend, client_body: dict) -> dict:
    body = dict(client_body)
    body["model"] = call.adapter or backend.served_model
    if body.get("max_completion_tokens") and not body.get("max_tokens"):
        body["max_tokens"] = body["max_completion_tokens"]  # engines that predate the new name
    if call.stream:
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True   # always: usage is how tokens are accounted
        body["stream_options"] = options
    return body


async def _call_backend(state: GatewayState, call: Call, model_view, backend, body: dict,
                        attempt: int):
    """Start `body` on `backend` (breaker permit, accounting, trace span); the engine's
    result, or EngineError."""
    permit = state.breaker.get(backend.id).try_acquire()
    if permit is None:  # lost the race for a half-open probe
        raise EngineError("breaker_open", f"backend {backend.id} is not accepting requests")
    adapter = state.adapters.get(backend)
    upstream = _upstream_body(call, backend, body)
    call.acct.unbind()
    call.acct.permit = permit
    call.acct.bind(model_view, backend)
    method = adapter.chat if call.kind == "chat" else adapter.completions
    span = call.acct.upstream = UpstreamTrace(backend, attempt)
    try:
        with span.sending():
            return await method(upstream)
    except EngineError as exc:
        span.fail(exc.kind, exc.message)
        call.acct.unbind()
        raise
    except BaseException:
        span.end(CLIENT_CLOSED)
        call.acct.unbind()
        raise


def _rename(call: Call, backend) -> tuple[bytes, bytes] | None:
    served = call.adapter or backend.served_model
    return None if served == call.requested else (
        f'"model":"{served}"'.encode(), f'"model":"{call.requested}"'.encode())


async def _try_backend(request: Request, state: GatewayState, call: Call, model_view,
                       backend, attempt: int = 0, backends=(), tried=None) -> Response:
    result = await _race_disconnect(request, _call_backend(state, call, model_view, backend,
                                                           call.body, attempt))
    if call.stream:
        call.acct.upstream.streaming()
        call.acct.upstream_ok()   # the engine produced a first token: count it healthy
        call.acct.first_token()
        resume = None
        if may_resume(state.settings.resume_streams, call.kind, call.body):
            resume = _resumer(state, call, model_view, backends, tried or {backend.id})
        return SSEResponse(relay_stream(result, call.acct, call.client_wants_usage,
                                        _rename(call, backend), resume), headers=SSE_HEADERS)
    text = chat_text if call.kind == "chat" else completion_text
    content = finish_json(result, call.acct, call.requested, text)
    if call.acct.text_parts is not None:
        call.acct.text_parts.append(text(result))
    call.acct.upstream_ok()
    call.acct.finish(200)
    return Response(content, media_type="application/json")


def _resumer(state: GatewayState, call: Call, model_view, backends, tried: set[str]):
    """The relay's way to continue a broken stream on another backend of the same version."""
    candidates = [b for b in backends if can_continue(call.kind, b)]

    async def resume(sent_text: str, sent_tokens: int, error: EngineError):
        body = continuation_body(call.kind, call.body, sent_text, sent_tokens)
        if body is None:
            return None
        for attempt in range(1, state.settings.retries + 1):
            backend = state.router.pick(model_view, candidates, call.ctx, tried)
            if backend is None:
                return None
            tried.add(backend.id)
            try:
                stream = await _call_backend(state, call, model_view, backend, body, attempt)
            except EngineError as exc:
                call.acct.upstream_error(backend, exc.kind)
                continue
            call.acct.upstream.streaming()
            call.acct.upstream_ok()
            state.metrics.stream_resumes.labels(call.requested, error.kind).inc()
            return stream, _rename(call, backend)
        return None

    return resume


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


async def _race_disconnect(request: Request, work):
    """Await `work`, abandoning (and so aborting upstream) if the client goes away first."""
    work_task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_wait_disconnect(request))
    try:
        await asyncio.wait((work_task, watch), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        # The handler itself was cancelled (server shutdown, the relay gave up): the upstream
        # call must not outlive it, and its outcome is retrieved so nothing is left unread.
        work_task.cancel()
        work_task.add_done_callback(_retrieve)
        raise
    finally:
        if not watch.done():
            watch.cancel()
    if work_task.done():
        return work_task.result()
    work_task.cancel()
    try:
        await work_task
    except BaseException:
        pass
    raise ClientGone()
