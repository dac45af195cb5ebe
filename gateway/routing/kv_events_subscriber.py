"""ZMQ subscriptions to vLLM's KV cache event publishers, feeding a KvEventIndex.

vLLM (`--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'`) publishes multipart messages
`[topic, seq (8 bytes, big-endian), msgpack batch]` on a PUB socket, and keeps its recent batches
for a ROUTER socket: a DEALER sends `[b"", start_seq]` and gets `[b"", seq, batch]` for every
buffered seq >= start, then `[b"", -1, b""]`.

    subscribers = KvEventSubscribers(settings.routing.kv_events, KvEventIndex(router.resident))
    subscribers.sync(backends)    # every load poll: one task per configured backend
    subscribers.close()

vLLM binds its PUB socket for a wildcard endpoint and connects it otherwise: with
`endpoint: tcp://127.0.0.1:P` it connects to P, and the gateway's source says `bind: true`.
The replay socket is always bound by vLLM.

Sequence rules: on subscribing, everything the engine still buffers is replayed (blocks stored
before the gateway subscribed; live batches it also replayed are skipped); a gap is filled from
the replay socket, and when replay cannot fill it (no replay socket, or the engine's buffer moved
on) the backend's index is cleared, so it is never routed on blocks it may have evicted. A sequence that goes backwards is an engine restart: cleared too.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
import zmq
import zmq.asyncio

from gateway.routing.kv_events import KvEventIndex

log = logging.getLogger("inferplane.gateway")
END_SEQ = -1
REPLAY_TIMEOUT_S = 2.0
_decode = msgspec.msgpack.Decoder().decode


def _seq(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


class KvEventSubscriber:
    """One backend's event stream: SUB socket, sequence tracking, replay."""

    def __init__(self, backend_id: str, source, index: KvEventIndex, ctx: zmq.asyncio.Context):
        self.backend_id = backend_id
        self.source = source
        self.index = index
        self.ctx = ctx
        self.last_seq: int | None = None
        self.batches = 0
        self._dedupe_until: int | None = None

    async def run(self) -> None:
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, (self.source.topic or "").encode())
        if self.source.bind:   # vLLM started with a host endpoint connects to us
            sub.bind(self.source.endpoint)
        else:
            sub.connect(self.source.endpoint)
        try:
            await self._catch_up()
            while True:
                frames = await sub.recv_multipart()
                if len(frames) < 3:
                    continue
                await self.on_batch(_seq(frames[-2]), frames[-1])
        finally:
            sub.close()

    async def _catch_up(self) -> None:
        """Everything the engine still buffers, before the first live batch: a gateway that
        (re)starts knows what an idle engine holds."""
        got = await self._fetch(0) if self.source.replay_endpoint else None
        for seq, payload in got or ():
            self._apply(seq, payload)
        if got:
            self._dedupe_until = got[-1][0]

    async def on_batch(self, seq: int, payload: bytes) -> None:
        if self._dedupe_until is not None:
            if seq <= self._dedupe_until:
                return   # published while the catch-up replay ran: already applied
            self._dedupe_until = None
        expected = 0 if self.last_seq is None else self.last_seq + 1
        if self.last_seq is not None and seq < expected:
            log.info("KV events of %s restarted at %d: index cleared", self.backend_id, seq)
            self.index.clear(self.backend_id)
            expected = 0
        if seq > expected and not await self._replay(expected, seq):
            if self.last_seq is not None:   # a real gap (not just joining late): start afresh
                log.warning("KV events %d..%d of %s lost: index cleared", expected, seq - 1,
                            self.backend_id)
                self.index.clear(self.backend_id)
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            self.index.apply(self.backend_id, _decode(payload))
        except msgspec.DecodeError:
            log.warning("undecodable KV event batch %d from %s", seq, self.backend_id)
        self.last_seq = seq
        self.batches += 1

    async def _replay(self, start: int, until: int) -> bool:
        """Apply buffered batches start..until-1; True when all of them came back."""
        if not self.source.replay_endpoint:
            return False
        got = [(seq, p) for seq, p in await self._fetch(start) or () if seq < until]
        complete = [seq for seq, _ in got] == list(range(start, until))
        if not complete and self.last_seq is not None:
            return False      # the caller clears the index; what came back is not enough
        for seq, payload in got:
            self._apply(seq, payload)
        return complete

    async def _fetch(self, start: int) -> list[tuple[int, bytes]] | None:
        """The engine's buffered batches from `start` on (None when the replay fails)."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.source.replay_endpoint)
        got: list[tuple[int, bytes]] = []
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            async with asyncio.timeout(REPLAY_TIMEOUT_S):
                while True:
                    frames = await dealer.recv_multipart()
                    seq = _seq(frames[-2])
                    if seq == END_SEQ:
                        return got
                    if seq >= start:
                        got.append((seq, frames[-1]))
        except (TimeoutError, zmq.ZMQError) as exc:
            log.warning("KV event replay from %s failed: %r", self.backend_id, exc)
            return None
        finally:
            dealer.close()


class KvEventSubscribers:
    """A subscriber task per backend that has a KV event source in the settings (by backend id
    or by URL), started and stopped as backends come and go."""

    def __init__(self, sources: dict, index: KvEventIndex):
        self.sources = sources
        self.index = index
        self.subscribers: dict[str, KvEventSubscriber] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._ctx: zmq.asyncio.Context | None = None

    def source_for(self, backend):
        return self.sources.get(backend.id) or self.sources.get(backend.url)

    def sync(self, backends) -> None:
        if not self.sources:
            return
        wanted = {b.id: src for b in backends if (src := self.source_for(b)) is not None}
        for backend_id in [b for b in self._tasks if b not in wanted]:
            self._stop(backend_id)
        for backend_id, source in wanted.items():
            task = self._tasks.get(backend_id)
            if task is not None and not task.done():
                continue
            if self._ctx is None:
                self._ctx = zmq.asyncio.Context()
            sub = self.subscribers[backend_id] = KvEventSubscriber(backend_id, source, self.index,
                                                                   self._ctx)
            self._tasks[backend_id] = asyncio.create_task(sub.run(), name=f"kv-events-{backend_id}")

    def _stop(self, backend_id: str) -> None:
        task = self._tasks.pop(backend_id, None)
        if task is not None:
            task.cancel()
        self.subscribers.pop(backend_id, None)
        self.index.clear(backend_id)

    def close(self) -> None:
        for backend_id in list(self._tasks):
            self._stop(backend_id)
        if self._ctx is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._ctx.destroy(linger=0)
            self._ctx = None
