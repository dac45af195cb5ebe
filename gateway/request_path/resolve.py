"""From the client's `model` string to what serves it: model, pinned version, LoRA adapter."""
from __future__ import annotations

from common.error_codes import ErrorCode
from common.errors import OpenAIError
from common.vocabulary import ModelTask
from gateway.traffic.splits import choose


def resolve_model(snapshot, requested: str):
    """(ModelView, pinned version or None, adapter or None); 404 when nothing matches.

    "<model>" and "<model>:<alias>" come from the snapshot; "<model>:<adapter>" names one of
    the model's LoRA adapters.
    """
    found = snapshot.resolve(requested)
    if found is not None:
        return found[0], found[1], None
    base, sep, adapter = requested.partition(":")
    model = snapshot.models.get(base) if sep else None
    if model is not None and adapter in (getattr(model, "adapters", ()) or ()):
        return model, None, adapter
    raise model_not_found(requested)


def check_access(principal, requested: str, model_view) -> None:
    """The key's allowlist admits the request: "<model>" admits the model with its aliases and
    adapters, "<model>:<alias>" (or adapter) only that one. A refusal looks exactly like a
    missing model (OpenAI's convention) and names nothing but what was asked for."""
    if not (principal.may_use(requested) or principal.may_use(model_view.name)):
        raise model_not_found(requested)


def check_task(protocol, model_view) -> None:
    """An embedding model answers /v1/embeddings only: a chat or completion request for it is
    refused here, not forwarded to an engine that would answer it with a 404."""
    if model_view.task == ModelTask.EMBEDDING and protocol.method != "embeddings":
        raise OpenAIError(400, f"'{model_view.name}' is an embedding model: send it to "
                          "/v1/embeddings", param="model", code=ErrorCode.NOT_A_CHAT_MODEL)


def fallback_views(snapshot, model_view, principal) -> list:
    """The model's fallbacks that exist and that the key may use itself: a key restricted to
    model A is never served by model B because A names B as its fallback."""
    views = (snapshot.models.get(name) for name in model_view.fallbacks
             if principal is None or principal.may_use(name))
    return [v for v in views if v is not None]


def model_not_found(requested: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{requested}' does not exist or you do not have access "
                       "to it.", param="model", code=ErrorCode.MODEL_NOT_FOUND)


def choose_version(model_view, sticky_key: str | None) -> str | None:
    """The serving version from the model's traffic splits (shadow splits never serve);
    sticky per session/user so A/B users stay on one version across gateway replicas."""
    weights = {s.version: s.weight for s in getattr(model_view, "splits", ())
               if not s.shadow and s.weight > 0 and s.version}
    if not weights:
        return None
    return choose(weights, sticky_key=sticky_key, salt=model_view.name)


def shadow_versions(model_view) -> list:
    return [s for s in getattr(model_view, "splits", ()) if s.shadow and s.weight > 0]
