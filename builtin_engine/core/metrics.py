"""Prometheus metrics under vLLM's names and types, so dashboards and scrapers work unchanged.

prometheus-client appends "_total" to counter samples, so counters are declared without it
(vllm:prompt_tokens is exposed as vllm:prompt_tokens_total, as vLLM does).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from builtin_engine.core.request import Request

FINISH_REASONS = ("stop", "length", "abort", "error")
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                  100000)
_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class EngineMetrics:
    def __init__(self, model_name: str, cache_info: dict[str, str] | None = None,
                 num_spec_tokens: int = 0) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        labels, r = ["model_name"], self.registry

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        def counter(name, doc):
            return Counter(name, doc, labels, registry=r).labels(model_name)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.swapped = gauge("vllm:num_requests_swapped", "Requests swapped out to CPU.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage (1 = full).")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache lookups, in tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative preemptions.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens.")
        success = Counter("vllm:request_success", "Finished requests by finish reason.",
                          labels + ["finished_reason"], registry=r)
        self.success = {reason: success.labels(model_name, reason) for reason in FINISH_REASONS}
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.",
                              _LATENCY_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency.",
                             _ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end latency.",
                             _E2E_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds",
                                    "Time waiting before the first schedule.", _E2E_BUCKETS)
        self.req_prompt = histogram("vllm:request_prompt_tokens", "Prompt length.",
                                    _TOKEN_BUCKETS)
        self.req_generation = histogram("vllm:request_generation_tokens",
                                        "Generated tokens per request.", _TOKEN_BUCKETS)
        self.iteration = histogram("vllm:iteration_tokens_total", "Tokens per engine step.",
                                   _ITERATION_BUCKETS)
        info = {k: str(v) for k, v in (cache_info or {}).items()}
        Gauge("vllm:cache_config_info", "Information of the KV cache config.",
              list(info), registry=r).labels(**info).set(1)
        self._last_queries = self._last_hits = self._last_preemptions = 0
        self.spec = SpecDecodeMetrics(r, model_name, num_spec_tokens) if num_spec_tokens else None

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def observe_step(self, *, num_running: int, num_waiting: int, num_swapped: int,
                     kv_usage: float, num_tokens: int, prefix_queries: int, prefix_hits: int,
                     num_preemptions: int) -> None:
        self.running.set(num_running)
        self.waiting.set(num_waiting)
        self.swapped.set(num_swapped)
        self.kv_usage.set(kv_usage)
        if num_tokens:
            self.iteration.observe(num_tokens)
        # The engine keeps running totals; the counters advance by the difference.
        self._advance(self.prefix_queries, prefix_queries, "_last_queries")
        self._advance(self.prefix_hits, prefix_hits, "_last_hits")
        self._advance(self.preemptions, num_preemptions, "_last_preemptions")

    def _advance(self, counter, total: int, attr: str) -> None:
        delta = total - getattr(self, attr)
        if delta > 0:
            counter.inc(delta)
            setattr(self, attr, total)

    def observe_tokens(self, num_prompt_tokens: int, num_generated_tokens: int) -> None:
        if num_prompt_tokens:
            self.prompt_tokens.inc(num_prompt_tokens)
        if num_generated_tokens:
            self.generation_tokens.inc(num_generated_tokens)

    def observe_token_gap(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def observe_finished(self, req: Request, now: float) -> None:
        self.success[req.finish_reason or "error"].inc()
        self.e2e.observe(max(now - req.arrival_time, 0.0))
        self.req_prompt.observe(req.num_prompt_tokens)
        self.req_generation.observe(req.num_output_tokens)
        if req.first_scheduled_time is not None:
            self.queue_time.observe(req.first_scheduled_time - req.arrival_time)

    def observe_spec_drafts(self, drafts: list[tuple[int, int]]) -> None:
        """(drafted, accepted) per verified draft of the last step."""
        if self.spec is not None and drafts:
            self.spec.observe(drafts)

    def observe_first_token(self, req: Request) -> None:
        if req.first_token_time is not None:
            self.ttft.observe(req.first_token_time - req.arrival_time)


class SpecDecodeMetrics:
    """vLLM's vllm:spec_decode_* counters: drafts, drafted and accepted tokens, and accepted
    tokens by draft position (acceptance rate = accepted / drafted; mean accepted length =
    1 + accepted / drafts)."""

    def __init__(self, registry: CollectorRegistry, model_name: str, num_spec_tokens: int):
        labels = ["model_name"]

        def counter(name, doc):
            return Counter(name, doc, labels, registry=registry).labels(model_name)

        self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens",
                                "Number of accepted tokens.")
        per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                          "Accepted tokens per draft position.", labels + ["position"],
                          registry=registry)
        self.per_pos = [per_pos.labels(model_name, str(i)) for i in range(num_spec_tokens)]

    def observe(self, drafts: list[tuple[int, int]]) -> None:
        accepted = 0
        for drafted, n in drafts:
            accepted += n
            for pos in range(min(n, len(self.per_pos))):
                self.per_pos[pos].inc()
        self.drafts.inc(len(drafts))
        self.draft_tokens.inc(sum(d for d, _ in drafts))
        self.accepted.inc(accepted)
