"""Backend pickers. Each strategy ranks the routable candidates of one model; which strategy a
model uses is configuration (RoutingSettings.strategy / per_model / ModelView.routing), named
by the strategy's `kind` (a RoutingStrategy)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import xxhash

from common.vocabulary import RoutingStrategy
from gateway.routing.load_book import LoadBook
from gateway.routing.prefix_index import PrefixIndex, block_hashes
from gateway.routing.resident import ResidentBlocks, token_block_hashes


@dataclass
class RouteContext:
    model: str
    prompt_text: str = ""
    session_key: str | None = None
    adapter: str | None = None
    # the prompt's token ids when the engine tokenized it (precise prefix routing)
    token_ids: list[int] | None = None
    # filled by prefix_aware for metrics: (blocks looked up, blocks matched on the pick) and
    # tokens per block (0: character blocks, converted at ~4 characters per token)
    prefix_blocks: int = 0
    prefix_matched: int = 0
    block_tokens: int = 0
    hashes: list[int] = field(default_factory=list)


def least_loaded(candidates: list, book: LoadBook):
    return min(candidates, key=lambda b: (book.load(b.id) / max(b.weight or 1.0, 1e-6), b.id))


class RoundRobin:
    kind = RoutingStrategy.ROUND_ROBIN

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def pick(self, candidates: list, ctx: RouteContext):
        i = self._next.get(ctx.model, 0)
        self._next[ctx.model] = i + 1
        return candidates[i % len(candidates)]


class LeastLoaded:
    kind = RoutingStrategy.LEAST_LOADED

    def __init__(self, book: LoadBook):
        self.book = book

    def pick(self, candidates: list, ctx: RouteContext):
        return least_loaded(candidates, self.book)


class PowerOfTwo:
    """Two random candidates, the less loaded wins: near least-loaded without herding."""

    kind = RoutingStrategy.P2C

    def __init__(self, book: LoadBook, rng: random.Random | None = None):
        self.book = book
        self.rng = rng or random.Random()

    def pick(self, candidates: list, ctx: RouteContext):
        if len(candidates) == 1:
            return candidates[0]
        a, b = self.rng.sample(candidates, 2)
        return a if self.book.load(a.id) <= self.book.load(b.id) else b


class Weighted:
    """Smooth weighted round robin (nginx): shares follow BackendView.weight exactly."""

    kind = RoutingStrategy.WEIGHTED

    def __init__(self) -> None:
        self._current: dict[str, float] = {}

    def pick(self, candidates: list, ctx: RouteContext):
        total = 0.0
        best = None
        for b in candidates:
            w = max(b.weight or 1.0, 0.0)
            total += w
            self._current[b.id] = self._current.get(b.id, 0.0) + w
            if best is None or self._current[b.id] > self._current[best.id]:
                best = b
        self._current[best.id] -= total
        return best


class PrefixAware:
    """Most cached prefix wins, but only among backends within `slack` of the least loaded,
    so a hot prefix spreads once its backend is busy.

    Precise when the prompt's token ids are known and some candidate reports its resident KV
    blocks: the score is the number of leading tokens the engine really holds, ties broken by
    the approximate index. Otherwise the gateway's own approximate index of prompt text it
    routed."""

    kind = RoutingStrategy.PREFIX_AWARE

    def __init__(self, book: LoadBook, index: PrefixIndex, block_chars: int, slack: float,
                 resident: ResidentBlocks | None = None):
        self.book = book
        self.index = index
        self.block_chars = block_chars
        self.slack = slack
        self.resident = resident or ResidentBlocks()

    def _eligible(self, candidates: list) -> list:
        floor = min(self.book.load(b.id) for b in candidates)
        return [b for b in candidates if self.book.load(b.id) <= floor + self.slack]

    def pick(self, candidates: list, ctx: RouteContext):
        if ctx.token_ids is not None and not ctx.adapter and any(
                self.resident.knows(b.id) for b in candidates):
            return self._pick_precise(candidates, ctx)
        ctx.hashes = block_hashes(ctx.prompt_text, self.block_chars)
        ctx.prefix_blocks = len(ctx.hashes)
        best = max(self._eligible(candidates),
                   key=lambda b: (self.index.match(b.id, ctx.hashes), -self.book.load(b.id)))
        ctx.prefix_matched = self.index.match(best.id, ctx.hashes)
        self.index.insert(best.id, ctx.hashes)
        return best

    def _pick_precise(self, candidates: list, ctx: RouteContext):
        by_size: dict[int, list[int]] = {}

        def hashes(backend) -> tuple[int, list[int]]:
            size = self.resident.block_size(backend.id) or next(
                self.resident.block_size(b.id) for b in candidates if self.resident.knows(b.id))
            if size not in by_size:
                by_size[size] = token_block_hashes(ctx.token_ids, size)
            return size, by_size[size]

        def matched_tokens(backend) -> int:
            # Compared in tokens: block sizes differ between engines (vLLM on CPU 128, the
            # builtin engine 16), so a block count alone would favour the small blocks.
            size, block_hashes_ = hashes(backend)
            return self.resident.match(backend.id, block_hashes_) * size

        # Ties (most often: no engine holds the prefix any more, evicted everywhere) go to where
        # the gateway sent this prompt before, then to the least loaded: choosing by load alone
        # would scatter a tenant over every engine and each cache would hold it once more.
        text_hashes = block_hashes(ctx.prompt_text, self.block_chars)
        best = max(self._eligible(candidates),
                   key=lambda b: (matched_tokens(b), self.index.match(b.id, text_hashes),
                                  -self.book.load(b.id)))
        self.index.insert(best.id, text_hashes)
        ctx.block_tokens, ctx.hashes = hashes(best)
        ctx.prefix_blocks = len(ctx.hashes)
        ctx.prefix_matched = self.resident.match(best.id, ctx.hashes)
        self.resident.add(best.id, ctx.hashes)
        return best


class LoraAffinity(LeastLoaded):
    """Least loaded among the backends holding the requested adapter: the router narrows the
    candidates to those for every strategy whenever one holds it (Router.holding), so what is
    left here is least loaded (overall when the request names no adapter or none holds it)."""

    kind = RoutingStrategy.LORA_AFFINITY


class SessionAffinity:
    """Rendezvous hashing of the session key: sticky while the backend stays routable, and only
    that backend's sessions move when it leaves."""

    kind = RoutingStrategy.SESSION_AFFINITY

    def __init__(self, book: LoadBook):
        self.book = book

    def pick(self, candidates: list, ctx: RouteContext):
        if not ctx.session_key:
            return least_loaded(candidates, self.book)
        key = ctx.session_key.encode()
        return max(candidates, key=lambda b: xxhash.xxh3_64_intdigest(key + b"\0" + b.id.encode()))
