"""The gateway's response cache: answers kept per tenant, model, version and request, looked
up after a request passed its limits and the split chose its version (so a hit still counts
against rate limits and budgets, and is accounted as a request like any other).

    cache = ResponseCache(settings, metrics)        # one per gateway process (services.cache)
    ticket = await cache.lookup(request, services, scope, model_view, version)
    if ticket is not None and ticket.hit is not None:
        return ticket.hit                            # answered from the cache
    call = replace(call, protocol=ticket.capture(call.protocol, model_view, version,
                                                 call.adapter))     # a miss: keep its answer
    return ticket.mark(await dispatch(...))          # x-inferplane-cache: miss

A model is cached only when its policy (`ModelView.cache`, registry.cache_policy) says so;
`lookup` is never called otherwise. The client's `cache-control` header: `no-cache` skips the
lookup (the fresh answer is stored), `no-store` keeps the answer out of the cache (the lookup
still happens), both together bypass it. Non-deterministic requests (no seed, temperature not
0) bypass it unless the policy allows them. A bypassed request carries no
x-inferplane-cache header and its usage row no cache field.

Exact lookups first; then, where the policy is semantic, the last user message is embedded
and compared within its partition (gateway/cache/semantic.py). Streamed and non-streamed
answers are kept apart: a streamed request replays a stored stream, a non-streamed one a
stored JSON body (a stored stream does not answer a non-streamed request, nor the reverse).
A `no-cache` answer is stored in the exact cache only: the semantic entry needs the embedding
its lookup would have made.
"""
from __future__ import annotations

import asyncio
import time

from common.metric_names import NO_VERSION
from gateway.cache.capture import CapturingProtocol
from gateway.cache.embedder import Embedder
from gateway.cache.entry import CachedAnswer
from gateway.cache.keys import RequestKeys, deterministic, request_keys, tenant_of
from gateway.cache.metrics import CacheMetrics
from gateway.cache.replay import replay
from gateway.cache.semantic import RedisSemanticFeed, SemanticIndex
from gateway.cache.stores import LocalExactStore, RedisExactStore
from gateway.limits.outage import make_client
from gateway.request_path.eager import start_eagerly
from registry.cache_policy import CachePolicy

CACHE_HEADER = "x-inferplane-cache"
REDIS_PREFIX = "inferplane:cache:"
HIT, MISS = "hit", "miss"
ALWAYS_DETERMINISTIC = frozenset({"embeddings"})   # an embedding has no sampling


def directives(header: str | None) -> tuple[bool, bool]:
    """(no-cache, no-store) from a Cache-Control request header."""
    if not header:
        return False, False
    parts = {p.strip().split("=", 1)[0].lower() for p in header.split(",")}
    return "no-cache" in parts, "no-store" in parts


class ResponseCache:
    def __init__(self, settings, gateway_metrics, prefix: str = REDIS_PREFIX):
        c = self.settings = settings.cache
        client = make_client(settings.redis_url) if settings.redis_url and c.shared else None
        self.exact = (RedisExactStore(client, prefix, c.max_entries, c.max_bytes) if client
                      else LocalExactStore(c.max_entries, c.max_bytes))
        self.semantic = SemanticIndex(c.max_entries, c.max_bytes, feed=RedisSemanticFeed(
            client, prefix, c.max_entries) if client else None)
        self.embedder = Embedder(c.embedding_timeout_s)
        self.metrics = CacheMetrics(gateway_metrics)
        self.pending: set[asyncio.Task] = set()    # stores still writing (Redis)

    async def lookup(self, request, services, scope, model_view, version) -> CacheTicket | None:
        policy: CachePolicy = model_view.cache
        parsed, protocol = scope.parsed, scope.endpoint.protocol
        no_cache, no_store = directives(request.headers.get("cache-control"))
        if not self.settings.enabled or (no_cache and no_store) or (
                policy.deterministic_only and protocol.name not in ALWAYS_DETERMINISTIC
                and not deterministic(parsed.body)):
            self.metrics.requests.labels(model_view.name, "bypass").inc()
            return None
        mode = protocol.name + (":stream" if parsed.stream else "")
        keys = request_keys(tenant_of(scope.principal, self.settings.tenant), model_view.name,
                            version or NO_VERSION, mode, parsed.body, policy.semantic)
        embedding_model = policy.embedding_model or self.settings.embedding_model
        ticket = CacheTicket(self, policy, keys, embedding_model, store=not no_store)
        scope.cache = MISS
        answer, result = (None, "miss") if no_cache else await self._find(services, ticket)
        self.metrics.requests.labels(model_view.name, result).inc()
        if answer is not None:
            scope.cache, scope.cache_price = HIT, policy.price_per_1k
            ticket.hit = await replay(scope, answer, {CACHE_HEADER: HIT})
        return ticket

    async def _find(self, services, ticket: CacheTicket) -> tuple[CachedAnswer | None, str]:
        policy, keys, m = ticket.policy, ticket.keys, self.metrics
        if policy.exact:
            started = time.perf_counter()
            answer = await self.exact.get(keys.exact)
            m.lookup.labels("exact").observe(time.perf_counter() - started)
            if answer is not None:
                return answer, "hit"
        if policy.semantic and keys.text is not None:
            started = time.perf_counter()
            vector = await self.embedder.embed(services, ticket.embedding_model, keys.text)
            found = None
            if vector is not None:
                ticket.vector = vector
                found = await self.semantic.search(ticket.partition, vector, policy.threshold)
            m.lookup.labels("semantic").observe(time.perf_counter() - started)
            if found is not None:
                return found[0], "semantic_hit"
        return None, "miss"

    async def keep(self, ticket: CacheTicket, answer: CachedAnswer) -> None:
        policy = ticket.policy
        if policy.exact:
            await self.exact.put(ticket.keys.exact, answer, policy.ttl_s)
            self.metrics.entries.labels("exact").set(self.exact.entries)
        if ticket.vector is not None:
            await self.semantic.add(ticket.partition, ticket.vector, answer, policy.ttl_s)
            self.metrics.entries.labels("semantic").set(self.semantic.entries)

    async def close(self) -> None:
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)
        await self.exact.close()


class CacheTicket:
    """One cached request's lookup outcome: the hit's response, or how to keep the miss."""
    __slots__ = ("cache", "embedding_model", "hit", "keys", "policy", "store", "vector")

    def __init__(self, cache: ResponseCache, policy: CachePolicy, keys: RequestKeys,
                 embedding_model: str, store: bool):
        self.cache = cache
        self.policy = policy
        self.keys = keys
        self.embedding_model = embedding_model
        self.store = store
        self.vector = None      # the last message's embedding (semantic lookups)
        self.hit = None         # the Response of a hit

    @property
    def partition(self) -> str:
        # Vectors of one embedding model only are compared with each other.
        return f"{self.keys.partition}\x1f{self.embedding_model}"

    def capture(self, protocol, model_view, version: str | None, adapter: str | None):
        """The protocol to call the engine with: the same, keeping the answer if allowed
        (only an answer of this version's backends: not a fallback model's)."""
        if not self.store:
            return protocol
        served = frozenset(b.served_model for b in model_view.backends_for(version)) | (
            {adapter} if adapter else set())
        return CapturingProtocol(protocol, served, self._keep,
                                 self.cache.settings.max_entry_bytes)

    def _keep(self, answer: CachedAnswer) -> None:
        start_eagerly(self.cache.keep(self, answer), self.cache.pending)

    def mark(self, response):
        response.headers[CACHE_HEADER] = MISS
        return response
