"""A model's response-cache policy: stored on the model row (`models.cache`, JSON), carried to
the gateway in its `ModelView.cache` (None: the model is not cached, the default).

    CachePolicy(exact=True, ttl_s=600)                        # identical deterministic requests
    CachePolicy(semantic=True, threshold=0.9)                 # paraphrases of the last message too
    policy_of(model.cache)       # the row's JSON as a policy; None when nothing is switched on

The control plane's YAML (`models[].cache`) and the admin API (`cache` on /admin/v1/models)
validate with this model; the gateway's `gateway.cache` section holds the process-wide
bounds (entries, bytes, Redis, the embedding model).
"""
from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger("inferplane.registry")
MAX_TTL_S = 30 * 24 * 3600


class CachePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    exact: bool = Field(True, description="answer identical requests from the cache")
    semantic: bool = Field(False, description="answer requests whose last message means the "
                           "same (cosine similarity of embeddings at least `threshold`)")
    threshold: float = Field(0.9, gt=0, le=1, description="semantic: the least cosine "
                             "similarity that counts as the same question")
    ttl_s: float = Field(3600.0, gt=0, le=MAX_TTL_S, description="seconds an answer is kept")
    deterministic_only: bool = Field(True, description="cache only requests with temperature "
                                     "0 or a seed (others may rightly answer differently)")
    price_per_1k: float = Field(0.0, ge=0, le=1e6, description="USD per 1000 tokens (prompt "
                                "and completion of the stored answer) charged for a hit")
    embedding_model: str | None = Field(None, min_length=1, max_length=200, description=(
        "semantic: the registered embedding model; null: the gateway's cache.embedding_model"))

    @property
    def enabled(self) -> bool:
        return self.exact or self.semantic


def policy_of(raw: dict[str, Any] | None) -> CachePolicy | None:
    """The stored JSON as a policy, None when absent or switching nothing on. A row written by
    a newer release (an unknown key) is logged and left uncached rather than failing the
    snapshot every gateway routes from."""
    if not raw:
        return None
    try:
        policy = CachePolicy.model_validate(raw)
    except ValidationError as exc:
        log.warning("ignoring an invalid cache policy %r: %s", raw, exc)
        return None
    return policy if policy.enabled else None


__all__ = ["CachePolicy", "policy_of"]
