"""The request path of every client API: typed stages around one RequestScope.

    authenticate (the route's dependency) → parse → resolve → limit (guardrails on the prompt)
    → split → cache (a hit answers here: gateway/cache) → ready → admit
    → route → call → relay (gateway/request_path/proxy.py) → account (RequestScope.close)

A route hands its Endpoint over and returns what this returns:

    return await handle(request, principal, CHAT_COMPLETIONS)

Every stage raises a domain error (common.errors.InferplaneError); it leaves here as
`endpoint.error_response(exc)`, in the client API's own shape. Resources are held by the
RequestScope from the limit stage on and released by its `close` (here on failure, at the end
of the answer otherwise).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace

from fastapi import Request
from fastapi.responses import Response

from common.connections import request_body
from common.error_codes import ErrorCode
from common.errors import InferplaneError, OpenAIError
from common.metric_names import NO_VERSION
from common.tracing import child_span
from common.vocabulary import BackendState, Priority, Tier
from gateway.apis.endpoint import Endpoint, ParsedRequest
from gateway.guardrails.request_guard import attach, guard_request
from gateway.request_path.accounting import CLIENT_CLOSED
from gateway.request_path.modalities import check_content
from gateway.request_path.proxy import Call, ClientGone, dispatch, has_candidates
from gateway.request_path.request_scope import RequestScope
from gateway.request_path.resolve import check_access, check_task, choose_version, resolve_model
from gateway.routing import RouteContext
from gateway.routing.precise import engine_token_count, tokenize_for_routing
from gateway.services import GatewayServices
from gateway.traffic.admission import QueueFull, QueueTimeout
from gateway.traffic.shadow import start_shadows
from registry.snapshot import ModelView, RoutingSnapshot

log = logging.getLogger("inferplane.gateway")
PRIORITIES = frozenset(Priority)


@dataclass(slots=True)
class Target:
    """The resolve stage's hand-off: the model serving the request and what pins it."""
    snapshot: RoutingSnapshot
    model_view: ModelView
    version: str | None     # pinned by an alias, else chosen by the split stage
    adapter: str | None     # LoRA adapter named by "<model>:<adapter>"


async def handle(request: Request, principal, endpoint: Endpoint) -> Response:
    services: GatewayServices = request.app.state.gateway
    started = time.perf_counter()
    try:
        parsed = endpoint.parse(await _read_body(request, services))
        target = resolve(services, parsed)
        scope = await limit(services, principal, endpoint, parsed, target, started)
    except InferplaneError as exc:
        return endpoint.error_response(exc)
    except Exception:
        return _internal_error(endpoint)
    try:
        return await _serve(request, services, scope, target)
    except InferplaneError as exc:
        await scope.close(exc.status)
        return endpoint.error_response(exc)
    except ClientGone:
        await scope.close(CLIENT_CLOSED)
        return Response(status_code=CLIENT_CLOSED)
    except Exception:
        await scope.close(500)
        return _internal_error(endpoint)
    except BaseException:   # cancelled (server shutdown): released, and the cancel goes on
        await scope.close(500)
        raise


async def handle_body(app, raw: bytes, principal, endpoint: Endpoint) -> Response:
    """`handle` for a body that did not come over HTTP (a batch's line): the same stages, on
    a request whose client never goes away. The answer is never a stream (the caller sends
    `stream` off)::

        response = await handle_body(app, b'{"model": ...}', principal, CHAT_COMPLETIONS)
    """
    return await handle(_detached_request(app, raw, endpoint.path), principal, endpoint)


def _detached_request(app, raw: bytes, path: str) -> Request:
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.Event().wait()   # no disconnect ever: the watcher waits until stopped

    scope = {"type": "http", "app": app, "method": "POST", "path": path, "headers": [],
             "query_string": b"", "http_version": "1.1"}
    return Request(scope, receive)


async def count_tokens(request: Request, principal, endpoint: Endpoint) -> int:
    """The prompt's length in the model's tokens, through the stages a request takes up to
    its limits: read, parse, resolve, access; then the engine's count (one ready backend's
    /tokenize) or, where no engine can tokenize, the limits' estimate. Nothing is reserved."""
    services: GatewayServices = request.app.state.gateway
    parsed = endpoint.parse(await _read_body(request, services))
    target = resolve(services, parsed)
    check_access(principal, parsed.model, target.model_view)
    tokens = await engine_token_count(services, endpoint.protocol, target.model_view, parsed.body)
    if tokens is None:
        tokens = endpoint.protocol.prompt_tokens(services.limits.estimator, parsed.body)
    return tokens


def _internal_error(endpoint: Endpoint) -> Response:
    """A bug in a stage: logged with its traceback, answered as a 500 in the API's shape."""
    log.exception("unhandled error in the %s pipeline", endpoint.name)
    return endpoint.error_response(InferplaneError("internal error"))


async def _read_body(request: Request, services: GatewayServices) -> bytes:
    raw = await request_body(request)
    if len(raw) > services.settings.max_body_bytes:
        raise OpenAIError(413, "request body too large", code=ErrorCode.BODY_TOO_LARGE)
    return raw


def resolve(services: GatewayServices, parsed: ParsedRequest) -> Target:
    snapshot = services.snapshot
    model_view, version, adapter = resolve_model(snapshot, parsed.model)
    return Target(snapshot, model_view, version, adapter)


def _validate(parsed: ParsedRequest, model_view) -> None:
    if parsed.n > 1:
        raise OpenAIError(400, "n > 1 is not supported: send n separate requests", param="n",
                          code=ErrorCode.UNSUPPORTED_VALUE)
    max_tokens = parsed.max_tokens
    context = model_view.context_length
    if max_tokens is not None and context and max_tokens > context:
        param = parsed.max_tokens_param
        raise OpenAIError(400, f"{param}={max_tokens} exceeds the model's context length "
                          f"({context} tokens)", param=param, code=ErrorCode.CONTEXT_LENGTH_EXCEEDED)


async def limit(services: GatewayServices, principal, endpoint: Endpoint,
                parsed: ParsedRequest, target: Target, started: float) -> RequestScope:
    """Access, validation and rate limits / budgets; the scope holding the reservation."""
    model_view = target.model_view
    gate = services.limits
    try:
        check_access(principal, parsed.model, model_view)
        check_task(endpoint.protocol, model_view)
        if services.cold_starter is not None:  # only requests the key may make count as activity
            services.cold_starter.note_request(model_view.name)
        _validate(parsed, model_view)
        check_content(endpoint.protocol, parsed.body, model_view)
        guard = await guard_request(services, principal, parsed, model_view.name)
        prompt_tokens = endpoint.protocol.prompt_tokens(gate.estimator, parsed.body)
        with child_span("gateway.limits"):
            decision, hold = await gate.admit(principal, target.snapshot, model_view,
                                              prompt_tokens, parsed.max_tokens)
    except InferplaneError as exc:   # refused before the scope exists: still a client answer
        services.metrics.requests.labels(parsed.model, NO_VERSION, str(exc.status)).inc()
        raise
    scope = RequestScope(services, principal, endpoint, parsed, started, prompt_tokens)
    attach(scope, guard)
    scope.hold_limits(gate, decision, hold)
    return scope


async def _serve(request: Request, services: GatewayServices, scope: RequestScope,
                 target: Target) -> Response:
    parsed, model_view = scope.parsed, target.model_view
    session = request.headers.get(services.settings.routing.session_header) or parsed.user
    protocol = scope.endpoint.protocol
    ctx = RouteContext(model=model_view.name, prompt_text=protocol.prompt_text(parsed.body),
                       session_key=session, adapter=target.adapter)
    call = Call(protocol, parsed, target.adapter, ctx, scope)
    # split: count the request for the version the split chose from now on: a refusal before
    # any backend is bound (its breaker open, no ready backend, queue full) is that version's
    # failure. Labelled "none", a failing canary's refusals would vanish from its metrics.
    version = target.version or choose_version(model_view, session)
    scope.version = version or NO_VERSION
    cached = None   # the response cache (gateway/cache): only models whose policy asks for it
    if model_view.cache is not None:
        cached = await services.cache.lookup(request, services, scope, model_view, version)
        if cached is not None and cached.hit is not None:
            return cached.hit
    model_view = await _ready_backends(services, call, model_view, version)
    with child_span("gateway.queue"):
        await _admit(services, scope, model_view, scope.prompt_estimate + (parsed.max_tokens
                                                                           or 0))
    start_shadows(services, call, model_view, version)
    with child_span("gateway.tokenize"):
        await tokenize_for_routing(services, call, model_view, model_view.backends_for(version))
    if cached is None:
        return await dispatch(request, services, call, model_view, version)
    # a copy: a shadow started above reads `call` later and must not be kept as the answer
    call = replace(call, protocol=cached.capture(call.protocol, model_view, version, call.adapter))
    return cached.mark(await dispatch(request, services, call, model_view, version))


async def _ready_backends(services: GatewayServices, call: Call, model_view, version):
    """The model view with a routable backend; a cold model (or an adapter nobody holds) is
    started through the control plane and the request held within the cold-start budget."""
    principal = call.scope.principal
    adapter = call.adapter
    # held per the registry or per the engine's own report (adapters an engine was started
    # with, e.g. vLLM's --lora-modules, are in its load poll only)
    if adapter is not None and services.cold_starter is not None and not any(
            b.state == BackendState.READY
            for b in services.router.holding(model_view.backends_for(version), adapter)):
        return await _load_adapter(services, call, model_view, version)
    if has_candidates(services, services.snapshot, model_view, version, principal):
        return model_view
    starter = services.cold_starter
    requested = call.parsed.model
    if starter is not None and (model_view.tier in (Tier.COLD, Tier.WARM) or call.adapter):
        budget = services.settings.admission.cold_start_budget_s
        with child_span("gateway.cold_start"):
            if await starter.ensure_backend(model_view.name, budget, adapter=call.adapter):
                snapshot = services.snapshot
                model_view = snapshot.models.get(model_view.name, model_view)
                if has_candidates(services, snapshot, model_view, version, principal):
                    return model_view
        raise _cold_start_timeout(services, requested, budget)
    services.metrics.rejections.labels(requested, "no_backend").inc()
    raise OpenAIError(503, f"no ready backend for model '{requested}'",
                      code=ErrorCode.NO_READY_BACKEND)


async def _load_adapter(services: GatewayServices, call: Call, model_view, version):
    """A LoRA adapter no backend holds: the control plane loads it (a free slot, else in place
    of the least recently used adapter past its minimum residency; every slot too young is a
    503 adapter_slots_busy with Retry-After), and the request is routed as if the snapshot
    already listed the adapter on the engine that loaded it."""
    requested, budget = call.parsed.model, services.settings.admission.cold_start_budget_s
    try:
        with child_span("gateway.adapter_load"):
            url = await services.cold_starter.load_adapter(model_view.name, call.adapter, budget)
    except InferplaneError as exc:
        services.metrics.rejections.labels(requested, exc.code or "adapter_load").inc()
        raise
    if url is not None:
        model_view = _held_at(services.snapshot.models.get(model_view.name, model_view), url,
                              call.adapter)
        if has_candidates(services, services.snapshot, model_view, version,
                          call.scope.principal):
            return model_view
    raise _cold_start_timeout(services, requested, budget)


def _held_at(model_view, url: str, adapter: str):
    """The view as the next snapshot will show it: the backend at `url` holding `adapter`
    (LoRA-affinity routing sends the request there). Every backend stays: the admission
    pool's per-backend caps are set from the view."""
    if any(b.url == url and adapter in b.adapters for b in model_view.backends):
        return model_view
    return replace(model_view, backends=tuple(
        replace(b, adapters=(*b.adapters, adapter)) if b.url == url else b
        for b in model_view.backends))


def _cold_start_timeout(services: GatewayServices, requested: str, budget: float) -> OpenAIError:
    services.metrics.rejections.labels(requested, "cold_start_timeout").inc()
    return OpenAIError(503, f"model '{requested}' did not start within {budget:.0f}s",
                       code=ErrorCode.COLD_START_TIMEOUT, headers={"Retry-After": "5"})


async def _admit(services: GatewayServices, scope: RequestScope, model_view, cost: int) -> None:
    """Wait for an admission slot (weighted fair queue); 429 when full, 503 on timeout."""
    pool = services.admission_pool(model_view)
    principal = scope.principal
    priority = principal.priority if principal.priority in PRIORITIES else Priority.STANDARD
    try:
        await scope.admit(pool, principal.team or principal.key_id, priority, max(1, cost))
    except QueueFull as exc:
        raise OpenAIError(429, f"too many queued requests for '{scope.requested}'",
                          type="rate_limit_error", code=ErrorCode.QUEUE_FULL,
                          headers={"retry-after": str(max(1, round(exc.retry_after)))})
    except QueueTimeout as exc:
        raise OpenAIError(503, f"timed out waiting for capacity on '{scope.requested}'",
                          code=ErrorCode.QUEUE_TIMEOUT,
                          headers={"retry-after": str(max(1, round(exc.retry_after)))})
