"""The text a guardrail reads in an engine body, and writing its masked form back in place.

    for text, put in prompt_texts(body):     # messages' text content, prompt, input
        put(text.replace("secret", "[X]"))  # replaces that one string in the body

Only text is read: image or audio parts, tool schemas and sampling fields are left alone.
"""
from __future__ import annotations

from typing import Callable, Iterator

Put = Callable[[str], None]


def _setter(container, key) -> Put:
    def put(value: str) -> None:
        container[key] = value
    return put


def _content(holder: dict) -> Iterator[tuple[str, Put]]:
    content = holder.get("content")
    if isinstance(content, str):
        yield content, _setter(holder, "content")
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"], _setter(part, "text")


def _strings(body: dict, key: str) -> Iterator[tuple[str, Put]]:
    value = body.get(key)
    if isinstance(value, str):
        yield value, _setter(body, key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                yield item, _setter(value, i)


def prompt_texts(body: dict) -> Iterator[tuple[str, Put]]:
    """Every text of the request: chat messages (string or text parts), a completion prompt,
    an embedding input."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                yield from _content(message)
    yield from _strings(body, "prompt")
    yield from _strings(body, "input")


def answer_texts(result: dict) -> Iterator[tuple[str, Put]]:
    """Every text of a non-streamed engine answer (chat message content, completion text)."""
    for choice in result.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            yield message["content"], _setter(message, "content")
        if isinstance(choice.get("text"), str):
            yield choice["text"], _setter(choice, "text")


__all__ = ["answer_texts", "prompt_texts"]
