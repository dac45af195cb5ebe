"""POST /v1/completions: the OpenAI (legacy) completions API, forwarded as it is.

    COMPLETION    # the engine protocol
    COMPLETIONS   # the client endpoint
"""
from __future__ import annotations

from gateway.apis.endpoint import Endpoint, EngineProtocol, ParsedRequest
from gateway.apis.schemas import CompletionRequest


class CompletionProtocol(EngineProtocol):
    name = "completions"
    method = "completions"

    def prompt_tokens(self, estimator, body: dict) -> int:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            return sum(len(p) for p in prompt)
        return estimator.count_prompt(prompt or "")

    def prompt_text(self, body: dict) -> str:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            return "".join(prompt)
        return ""

    def tokenize_body(self, body: dict, served_model: str):
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str) and prompt:
            return {"model": served_model, "prompt": prompt}
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        return None

    def result_text(self, result: dict) -> str:
        return "".join(c.get("text") or "" for c in result.get("choices", []))

    def delta_text(self, chunk: dict | None) -> str:
        if not chunk:
            return ""
        return "".join(choice.get("text") or "" for choice in chunk.get("choices") or ())

    def resumable(self, body: dict) -> bool:
        return isinstance(body.get("prompt"), str)   # a text prompt grows by the text sent

    def can_continue(self, backend) -> bool:
        return True    # any OpenAI server continues a completion

    def continuation(self, body: dict, sent_text: str) -> dict:
        body["prompt"] = body["prompt"] + sent_text
        return body


COMPLETION = CompletionProtocol()


class Completions(Endpoint):
    name = "completions"
    path = "/v1/completions"
    schema = CompletionRequest
    protocol = COMPLETION

    def to_engine(self, body: dict, req: CompletionRequest) -> ParsedRequest:
        return ParsedRequest(model=req.model, body=body, stream=req.stream,
                             include_usage=bool(req.stream_options
                                                and req.stream_options.include_usage),
                             max_tokens=req.max_tokens, max_tokens_param="max_tokens",
                             user=req.user, n=req.n)


COMPLETIONS = Completions()
