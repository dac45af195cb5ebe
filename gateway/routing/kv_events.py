"""vLLM's KV cache events (BlockStored / BlockRemoved / AllBlocksCleared) as resident blocks.

vLLM publishes, over ZMQ (`--kv-events-config`), every block its prefix cache stores or evicts:
msgpack batches `[ts, [event, ...], dp_rank]`. vLLM 0.32 sends each event as a map tagged by
`type`; older releases as an array tagged by its first item (fields in this order):

    {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
     "lora_id", "medium", "lora_name", "extra_keys", ...}
    {"type": "BlockRemoved", "block_hashes", "medium", ...}
    {"type": "AllBlocksCleared"}

vLLM chains its block hashes exactly like the builtin engine does (a block's hash covers its
parent's hash and its own token ids), only with another hash function (sha256 or sha256_cbor, and
a root hash that is random unless PYTHONHASHSEED is set). Each stored event carries the token ids
of its blocks, so the index re-hashes every block with the gateway's own chain
(`resident.token_block_hashes`, rooted at the parent block's gateway hash) and keeps a map from
vLLM's hash to it. The gateway then scores vLLM backends with the very code and hashes it uses for
builtin engines (`ResidentBlocks`), whatever hash algorithm each vLLM was started with.

    index = KvEventIndex(router.resident)
    index.apply("vllm-0", msgspec.msgpack.decode(payload))   # one published batch
    index.clear("vllm-0")                                    # a gap that replay cannot fill

Blocks of LoRA requests (lora_id set) and blocks with extra hash keys (cache_salt, multimodal
inputs) are left out: precise routing is for plain base-model prompts (precise.wants_precise),
and such blocks must not read as the plain prompt's.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from gateway.routing.resident import ResidentBlocks, token_block_hashes

log = logging.getLogger("inferplane.gateway")
ROOT_HASH = 0   # the gateway chain's parent of a first block (resident.token_block_hashes)


@dataclass
class _Engine:
    block_size: int
    ours: dict = field(default_factory=dict)      # vLLM block hash -> gateway chain hash
    refs: Counter = field(default_factory=Counter)  # gateway hash -> vLLM blocks mapping to it


class KvEventIndex:
    """Per-backend translation of vLLM block events into `ResidentBlocks` entries."""

    def __init__(self, resident: ResidentBlocks) -> None:
        self.resident = resident
        self._engines: dict[str, _Engine] = {}
        self.unknown_parents = 0   # stored blocks whose parent was never seen (missed events)

    def apply(self, backend_id: str, batch) -> None:
        """Apply one decoded KVEventBatch `[ts, events, ...]`."""
        try:
            events = batch[1]
        except (IndexError, TypeError, KeyError):
            log.warning("malformed KV event batch from %s", backend_id)
            return
        for raw in events or ():
            event = _as_map(raw)
            kind = event.get("type")
            if kind == "BlockStored":
                self._stored(backend_id, event)
            elif kind == "BlockRemoved":
                self._removed(backend_id, event.get("block_hashes") or ())
            elif kind == "AllBlocksCleared":
                self.clear(backend_id)

    def clear(self, backend_id: str) -> None:
        """Forget what the backend holds (cache reset, engine restart, events lost)."""
        self._engines.pop(backend_id, None)
        self.resident.forget(backend_id)

    def blocks(self, backend_id: str) -> int:
        engine = self._engines.get(backend_id)
        return len(engine.ours) if engine else 0

    def _engine(self, backend_id: str, block_size: int) -> _Engine:
        engine = self._engines.get(backend_id)
        if engine is None or engine.block_size != block_size:
            engine = self._engines[backend_id] = _Engine(block_size)
            self.resident.attach(backend_id, block_size)
        return engine

    def _stored(self, backend_id: str, event: dict) -> None:
        vllm_hashes, parent = event.get("block_hashes"), event.get("parent_block_hash")
        tokens, block_size = event.get("token_ids") or [], int(event.get("block_size") or 0)
        if event.get("lora_id") is not None or block_size <= 0 or not vllm_hashes:
            return
        if any(k is not None for k in event.get("extra_keys") or ()):
            return   # salted or multimodal blocks: their hashes cover more than the tokens
        engine = self._engine(backend_id, block_size)
        if parent is None:
            root = ROOT_HASH
        elif (root := engine.ours.get(_key(parent))) is None:
            self.unknown_parents += 1   # its chain is unknown: these blocks cannot be matched
            return
        ours = token_block_hashes(list(tokens), block_size, root=root)
        for vllm_hash, our_hash in zip(vllm_hashes, ours):
            key = _key(vllm_hash)
            if key in engine.ours:
                continue
            engine.ours[key] = our_hash
            engine.refs[our_hash] += 1
        self.resident.add(backend_id, ours[:len(vllm_hashes)])

    def _removed(self, backend_id: str, vllm_hashes) -> None:
        engine = self._engines.get(backend_id)
        if engine is None:
            return
        gone = []
        for vllm_hash in vllm_hashes or ():
            our_hash = engine.ours.pop(_key(vllm_hash), None)
            if our_hash is None:
                continue
            engine.refs[our_hash] -= 1
            if engine.refs[our_hash] <= 0:
                del engine.refs[our_hash]
                gone.append(our_hash)
        self.resident.discard(backend_id, gone)


_FIELDS = {"BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size",
                           "lora_id", "medium", "lora_name", "extra_keys"),
           "BlockRemoved": ("block_hashes", "medium"), "AllBlocksCleared": ()}


def _as_map(event) -> dict:
    """An event as a map: vLLM's tagged map as is, an array-like event by field order."""
    if isinstance(event, dict):
        return event
    if not isinstance(event, (list, tuple)) or not event:
        return {}
    names = _FIELDS.get(event[0], ())
    return {"type": event[0], **dict(zip(names, event[1:]))}


def _key(block_hash):
    # ExternalBlockHash is bytes or int; msgpack may hand back bytes as a list when re-encoded.
    return bytes(block_hash) if isinstance(block_hash, (bytearray, list)) else block_hash
