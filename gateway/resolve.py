"""From the client's `model` string to what serves it: model, pinned version, LoRA adapter."""
from __future__ import annotations

from gateway.errors import OpenAIError
from gateway.splits import choose


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


def model_not_found(requested: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{requested}' does not exist or you do not have access "
                       "to it.", param="model", code="model_not_found")


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
