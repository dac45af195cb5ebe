"""Chat templates (jinja2, as HF tokenizers ship them) rendered in a sandbox."""
from __future__ import annotations

import json

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _raise_exception(message: str):
    # Templates call this to reject conversations they cannot format (e.g. bad role order).
    raise ValueError(f"chat template error: {message}")


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _message_text(content) -> str:
    """OpenAI content may be a list of parts; the templates expect one string."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and part.get("type", "text") == "text")
    raise ValueError(f"message content must be a string or a list of parts, not {type(content).__name__}")


class ChatTemplate:
    def __init__(self, source: str):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols])
        env.globals["raise_exception"] = _raise_exception
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ValueError(f"invalid chat template: {exc}") from exc

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **variables) -> str:
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        normalised = []
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ValueError("each message needs a string 'role'")
            normalised.append({**message, "content": _message_text(message.get("content"))})
        try:
            return self._template.render(messages=normalised,
                                         add_generation_prompt=add_generation_prompt, **variables)
        except TemplateError as exc:
            raise ValueError(f"chat template failed: {exc}") from exc
