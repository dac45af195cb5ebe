"""What a model can read: content parts of other types are refused before any backend is called.

A model's registry entry declares its modalities (`text`, `image`, `audio`, `file`, `video`;
text-only by default). A chat message whose content holds a part the model does not declare
(an `image_url` sent to a text-only model, say) is a 400 naming the part, instead of an answer
from a model that silently never saw it.

    check_content(CHAT, body, model_view)   # None, or OpenAIError(400); CHAT: an EngineProtocol
    accepts(CHAT, body, fallback_view)      # False: skip that fallback
"""
from __future__ import annotations

from common.error_codes import ErrorCode
from common.errors import OpenAIError

TEXT_ONLY: tuple[str, ...] = ("text",)

# OpenAI's content part types (and vLLM's extensions) → the modality each needs
PART_MODALITY = {"text": "text", "image_url": "image", "input_image": "image", "image": "image",
                 "input_audio": "audio", "audio_url": "audio", "file": "file",
                 "video_url": "video"}


def check_content(protocol, body: dict, model_view) -> None:
    """None when `model_view` reads every content part of the body; OpenAIError(400) else."""
    refused = _first_refused(protocol.messages(body), model_view)
    if refused is None:
        return
    i, j, part_type, needed = refused
    if needed is None:
        raise OpenAIError(400, f"messages[{i}].content[{j}]: unknown content part type "
                          f"{part_type!r}", param=f"messages[{i}].content[{j}].type",
                          code=ErrorCode.INVALID_CONTENT_TYPE)
    declared = _declared(model_view)
    raise OpenAIError(400, f"model '{model_view.name}' does not accept {needed} input "
                      f"(messages[{i}].content[{j}] is of type {part_type!r}; the model accepts "
                      f"{', '.join(declared)})", param=f"messages[{i}].content[{j}]",
                      code=ErrorCode.UNSUPPORTED_CONTENT_TYPE)


def accepts(protocol, body: dict, model_view) -> bool:
    """Whether `model_view` reads the body (a fallback that does not is skipped)."""
    return _first_refused(protocol.messages(body), model_view) is None


def _declared(model_view) -> tuple[str, ...]:
    return getattr(model_view, "modalities", None) or TEXT_ONLY


def _first_refused(messages: list | None, model_view):
    """(message index, part index, part type, modality needed or None) of the first part the
    model cannot read, or None (also when the protocol carries no messages)."""
    if not messages:
        return None
    declared = _declared(model_view)
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else ()):
            part_type = part.get("type") if isinstance(part, dict) else None
            needed = PART_MODALITY.get(part_type) if isinstance(part_type, str) else None
            if needed is None or needed not in declared:
                return i, j, part_type, needed
    return None
