"""POST /v1/messages: Anthropic's Messages API, served by engines' chat completions.

    ANTHROPIC_MESSAGES    # the endpoint (a module singleton: it holds no request state)
    return await handle(request, principal, ANTHROPIC_MESSAGES)
    tokens = await count_tokens(request, principal, ANTHROPIC_COUNT_TOKENS)

Requests are translated by gateway/apis/anthropic/translate.py, answers and streams back by
it and gateway/apis/anthropic/stream.py; every error (a bad body, a refused key, a rate limit,
an engine failure) leaves in Anthropic's shape {"type": "error", "error": {type, message}}.
"""
from __future__ import annotations

from gateway.apis.anthropic import translate as at
from gateway.apis.anthropic.stream import MessagesStream
from gateway.apis.chat.endpoint import CHAT
from gateway.apis.endpoint import Endpoint, ParsedRequest
from gateway.apis.events import EventStream
from gateway.limits.tokens import TokenEstimator

# message_start's input_tokens, before the engine has counted: the limits' default estimate
_ESTIMATE = TokenEstimator()


class AnthropicMessages(Endpoint):
    name = "anthropic.messages"
    path = "/v1/messages"
    schema = at.MessagesRequest
    protocol = CHAT

    def parse(self, raw: bytes) -> ParsedRequest:
        return self.to_engine(*at.parse_messages_request(raw))

    def to_engine(self, body: dict, req: at.MessagesRequest) -> ParsedRequest:
        user = (req.metadata or {}).get("user_id")
        return ParsedRequest(model=req.model, body=at.to_chat(req), stream=req.stream,
                             include_usage=False, max_tokens=req.max_tokens,
                             max_tokens_param="max_tokens",
                             user=user if isinstance(user, str) else None)

    def from_engine(self, result: dict, parsed: ParsedRequest) -> dict:
        return at.from_chat(result, parsed.model, parsed.body.get("stop"))

    def stream_events(self, parsed: ParsedRequest) -> EventStream:
        body = parsed.body
        return EventStream(MessagesStream(parsed.model, body.get("stop"), input_estimate=
                                          CHAT.prompt_tokens(_ESTIMATE, body)))

    def error_body(self, exc) -> dict:
        return at.error_body(exc.status, exc.message)


class AnthropicCountTokens(AnthropicMessages):
    """POST /v1/messages/count_tokens: a Messages request without `max_tokens`, counted by the
    pipeline's `count_tokens` (parse, resolve, access, then the engine's /tokenize)."""
    name = "anthropic.count_tokens"
    path = "/v1/messages/count_tokens"
    schema = at.CountTokensRequest

    def parse(self, raw: bytes) -> ParsedRequest:
        return self.to_engine(*at.parse_messages_request(raw, at.CountTokensRequest))


ANTHROPIC_MESSAGES = AnthropicMessages()
ANTHROPIC_COUNT_TOKENS = AnthropicCountTokens()
