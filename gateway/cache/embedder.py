"""The semantic cache's embeddings: the prompt text sent to a registered embedding model
through the gateway's own engine adapters (as /v1/embeddings would), unit-normalised.

    embedder = Embedder(timeout_s=2.0)
    vector = await embedder.embed(services, "all-minilm-l6-v2", "what is the capital of France?")
    # None: no such model, no ready backend, the engine failed or was too slow

A None leaves the request to the exact cache and the engine: a slow or missing embedding
model never fails a request, it only stops semantic hits (logged once per failure streak).
"""
from __future__ import annotations

import asyncio
import itertools
import logging

import numpy as np

from common.vocabulary import BackendState
from engine_adapter.base import EngineError

log = logging.getLogger("inferplane.gateway.cache")


class Embedder:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._turn = itertools.count()
        self._failing = False

    async def embed(self, services, model: str, text: str) -> np.ndarray | None:
        view = services.snapshot.models.get(model)
        ready = [b for b in view.backends if b.state == BackendState.READY] if view else []
        if not ready:
            return self._failed(f"no ready backend for embedding model '{model}'")
        backend = ready[next(self._turn) % len(ready)]
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await services.adapters.get(backend).embeddings(
                    {"model": backend.served_model, "input": text})
            vector = np.asarray(result["data"][0]["embedding"], dtype=np.float32)
        except (EngineError, TimeoutError, KeyError, IndexError, TypeError, ValueError) as exc:
            return self._failed(f"embedding model '{model}' failed: {exc!r}")
        norm = float(np.linalg.norm(vector))
        if self._failing:
            self._failing = False
            log.info("semantic cache: embedding model '%s' answers again", model)
        return vector / norm if norm > 0 else None

    def _failed(self, why: str) -> None:
        if not self._failing:
            self._failing = True
            log.warning("semantic cache skipped: %s", why)
