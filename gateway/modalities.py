"""What a model can read: content parts of other types are refused before any backend is called.

A model's registry entry declares its modalities (`text`, `image`, `audio`, `file`, `video`;
text-only by default). A chat message whose content holds a part the model does not declare
(an `image_url` sent to a text-only model, say) is a 400 naming the part, instead of an answer
from a model that silently never saw it.

    check_content("chat", body, model_view)   # None, or OpenAIError(400)
"""
from __future__ import annotations

from typing import Literal

from gateway.errors import OpenAIError

Modality = Literal["text", "image", "audio", "file", "video"]
TEXT_ONLY: tuple[str, ...] = ("text",)

# OpenAI's content part types (and vLLM's extensions) → the modality each needs
PART_MODALITY = {"text": "text", "image_url": "image", "input_image": "image", "image": "image",
                 "input_audio": "audio", "audio_url": "audio", "file": "file",
                 "video_url": "video"}


def check_content(kind: str, body: dict, model_view) -> None:
    if kind != "chat":
        return
    declared = getattr(model_view, "modalities", None) or TEXT_ONLY
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            kind_of = part.get("type") if isinstance(part, dict) else None
            needed = PART_MODALITY.get(kind_of) if isinstance(kind_of, str) else None
            if needed is None:
                raise OpenAIError(400, f"messages[{i}].content[{j}]: unknown content part type "
                                  f"{kind_of!r}", param=f"messages[{i}].content[{j}].type",
                                  code="invalid_content_type")
            if needed not in declared:
                raise OpenAIError(
                    400, f"model '{model_view.name}' does not accept {needed} input "
                    f"(messages[{i}].content[{j}] is of type {kind_of!r}; the model accepts "
                    f"{', '.join(declared)})", param=f"messages[{i}].content[{j}]",
                    code="unsupported_content_type")
