"""POST /v1/chat/completions: the OpenAI chat API, forwarded to engines as it is.

    CHAT            # the engine protocol (Responses and Anthropic Messages translate to it)
    CHAT_COMPLETIONS  # the client endpoint
"""
from __future__ import annotations

from common.vocabulary import EngineKind
from gateway.apis.endpoint import Endpoint, EngineProtocol, ParsedRequest
from gateway.apis.schemas import ChatCompletionRequest

# vLLM's `continue_final_message` (also SGLang and the builtin engine) continues an answer.
CONTINUATION_ENGINES = frozenset({EngineKind.VLLM, EngineKind.SGLANG, EngineKind.BUILTIN})


class ChatProtocol(EngineProtocol):
    name = "chat"
    method = "chat"

    def prompt_tokens(self, estimator, body: dict) -> int:
        return estimator.count_messages(body.get("messages") or [])

    def prompt_text(self, body: dict) -> str:
        parts = []
        for m in body.get("messages") or ():
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
            parts.append(f"{m.get('role')}\n{content or ''}\n")
        return "".join(parts)

    def tokenize_body(self, body: dict, served_model: str):
        messages = body.get("messages")
        return {"model": served_model, "messages": messages, "add_generation_prompt": True} \
            if isinstance(messages, list) and messages else None

    def messages(self, body: dict) -> list | None:
        return body.get("messages") or ()

    def result_text(self, result: dict) -> str:
        return "".join((c.get("message") or {}).get("content") or ""
                       for c in result.get("choices", []))

    def delta_text(self, chunk: dict | None) -> str:
        if not chunk:
            return ""
        out = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta")
            out.append((delta.get("content") if isinstance(delta, dict) else None) or "")
        return "".join(out)

    def resumable(self, body: dict) -> bool:
        return True

    def can_continue(self, backend) -> bool:
        return backend.engine in CONTINUATION_ENGINES

    def continuation(self, body: dict, sent_text: str) -> dict:
        body["messages"] = [*body["messages"], {"role": "assistant", "content": sent_text}]
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
        return body


CHAT = ChatProtocol()


class ChatCompletions(Endpoint):
    name = "chat.completions"
    path = "/v1/chat/completions"
    schema = ChatCompletionRequest
    protocol = CHAT

    def to_engine(self, body: dict, req: ChatCompletionRequest) -> ParsedRequest:
        max_tokens = req.max_completion_tokens or req.max_tokens
        return ParsedRequest(
            model=req.model, body=body, stream=req.stream,
            include_usage=bool(req.stream_options and req.stream_options.include_usage),
            max_tokens=max_tokens, user=req.user, n=req.n,
            max_tokens_param="max_completion_tokens" if req.max_completion_tokens
            else "max_tokens")


CHAT_COMPLETIONS = ChatCompletions()
