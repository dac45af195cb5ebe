"""vLLM KV cache events into the gateway's resident-block index: hashing, eviction, replay and
restarts, against a real ZMQ publisher speaking vLLM's protocol (tests/peers runs real vLLM)."""
from __future__ import annotations

import asyncio

import msgspec
import pytest
import zmq
import zmq.asyncio

from gateway.routing.kv_events import KvEventIndex
from gateway.routing.kv_events_subscriber import END_SEQ, KvEventSubscriber
from gateway.routing.resident import ResidentBlocks, token_block_hashes
from gateway.settings import KvEventsSource
from tests.gateway.conftest import free_port

BS = 4
TOKENS = list(range(100, 116))   # four blocks
_encode = msgspec.msgpack.Encoder().encode


def stored(hashes, parent, tokens, lora_id=None):   # vLLM 0.32's map form
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": BS, "lora_id": lora_id, "medium": "GPU"}


def batch(*events):
    return [1.0, list(events), 0]


def test_stored_blocks_match_the_gateway_chain():
    resident = ResidentBlocks()
    index = KvEventIndex(resident)
    # two events: the second continues the chain from the first's last vLLM hash
    index.apply("v", batch(stored([b"a", b"b"], None, TOKENS[:8])))
    index.apply("v", batch(stored([b"c", b"d"], b"b", TOKENS[8:])))
    assert resident.block_size("v") == BS
    assert resident.match("v", token_block_hashes(TOKENS, BS)) == 4
    assert resident.match("v", token_block_hashes([1] + TOKENS[1:], BS)) == 0


def test_eviction_lora_and_unknown_parents():
    resident = ResidentBlocks()
    index = KvEventIndex(resident)
    index.apply("v", batch(stored([1, 2, 3], None, TOKENS[:12])))
    index.apply("v", batch(["BlockRemoved", [2], "GPU"]))   # the older array form
    assert resident.match("v", token_block_hashes(TOKENS, BS)) == 1
    index.apply("v", batch(stored([9], 777, TOKENS[12:])))          # parent never seen
    index.apply("v", batch(stored([8], None, [5, 6, 7, 8], lora_id=1)))
    index.apply("v", batch(["BlockStored", [6], None, [5, 6, 7, 8], BS, None, "GPU", None,
                            [("salt",)]]))
    assert index.unknown_parents == 1 and index.blocks("v") == 2
    assert resident.match("v", token_block_hashes([5, 6, 7, 8], BS)) == 0
    index.apply("v", batch({"type": "AllBlocksCleared"}))
    assert not resident.knows("v")


class FakeVllmPublisher:
    """vLLM's ZmqEventPublisher wire protocol: PUB [topic, seq, batch], ROUTER replay."""

    def __init__(self, ctx):
        self.pub_port, self.replay_port = free_port(), free_port()
        self.pub = ctx.socket(zmq.PUB)
        self.pub.bind(f"tcp://127.0.0.1:{self.pub_port}")
        self.router = ctx.socket(zmq.ROUTER)
        self.router.bind(f"tcp://127.0.0.1:{self.replay_port}")
        self.buffer: list[tuple[int, bytes]] = []

    def source(self) -> KvEventsSource:
        return KvEventsSource(endpoint=f"tcp://127.0.0.1:{self.pub_port}",
                              replay_endpoint=f"tcp://127.0.0.1:{self.replay_port}", topic="kv")

    async def publish(self, seq: int, payload, send: bool = True) -> None:
        raw = _encode(payload)
        self.buffer.append((seq, raw))
        if send:
            await self.pub.send_multipart([b"kv", seq.to_bytes(8, "big"), raw])

    async def serve_replay(self) -> None:
        while True:
            ident, _, start = await self.router.recv_multipart()
            for seq, raw in self.buffer:
                if seq >= int.from_bytes(start, "big"):
                    await self.router.send_multipart([ident, b"", seq.to_bytes(8, "big"), raw])
            await self.router.send_multipart([ident, b"", END_SEQ.to_bytes(8, "big", signed=True),
                                              b""])


async def _until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.mark.timeout(30)
async def test_subscriber_replays_gaps_and_clears_on_restart():
    ctx = zmq.asyncio.Context()
    pub = FakeVllmPublisher(ctx)
    replay = asyncio.create_task(pub.serve_replay())
    resident = ResidentBlocks()
    sub = KvEventSubscriber("v", pub.source(), KvEventIndex(resident), ctx)
    task = asyncio.create_task(sub.run())
    try:
        hashes = token_block_hashes(TOKENS, BS)
        # seq 0 was published before the subscriber joined: replayed when seq 1 arrives
        await pub.publish(0, batch(stored([1], None, TOKENS[:4])), send=False)
        while sub.batches == 0:   # PUB drops messages until the SUB's connection is up
            await pub.publish(1, batch(stored([2], 1, TOKENS[4:8])))
            await asyncio.sleep(0.1)
            pub.buffer.pop()
        await _until(lambda: resident.match("v", hashes) == 2)
        # seq 2 lost on the PUB socket: filled from the replay buffer when seq 3 arrives
        await pub.publish(2, batch(stored([3], 2, TOKENS[8:12])), send=False)
        await pub.publish(3, batch(stored([4], 3, TOKENS[12:])))
        await _until(lambda: resident.match("v", hashes) == 4)
        assert sub.last_seq == 3
        # the engine restarted: its sequence starts over, and what it held is gone
        pub.buffer.clear()
        await pub.publish(0, batch(stored([7], None, TOKENS[:4])))
        await _until(lambda: sub.last_seq == 0)
        assert resident.match("v", hashes) == 1
    finally:
        task.cancel()
        replay.cancel()
        await asyncio.gather(task, replay, return_exceptions=True)
        ctx.destroy(linger=0)
