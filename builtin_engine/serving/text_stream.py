"""From token ids to text: incremental detokenisation, stop strings and usage for one request;
grammars attached to constrained chat requests and their tool calls parsed out of the text."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import AsyncIterator

from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.core.simulator import SimulatedExecutor
from builtin_engine.errors import EngineError
from builtin_engine.serving.protocol import ChatCompletionRequest
from builtin_engine.structured.grammar import StructuredRequest, compiler_for
from builtin_engine.structured.matcher_pool import GrammarState
from builtin_engine.structured.tool_calls import ToolCallStream, render_messages
from common.error_codes import ErrorCode


@dataclass
class TextChunk:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    queue_time_s: float | None = None
    logprobs: list = field(default_factory=list)  # TokenLogprob of the tokens behind `text`
    tool_calls: list[dict] = field(default_factory=list)  # OpenAI delta.tool_calls entries


def resolve_max_tokens(num_prompt: int, requested: int | None, max_model_len: int,
                       param: str = "max_tokens") -> int:
    """The engine's context check: the prompt plus the completion must fit the model."""
    if num_prompt == 0:
        raise EngineError(400, "the prompt is empty", param="messages")
    if num_prompt >= max_model_len:
        raise EngineError(400, f"This model's maximum context length is {max_model_len} tokens. "
                               f"However, your prompt has {num_prompt} tokens.",
                          param="messages", code=ErrorCode.CONTEXT_LENGTH_EXCEEDED)
    room = max_model_len - num_prompt
    if requested is None:
        return room
    if requested > room:
        raise EngineError(400, f"This model's maximum context length is {max_model_len} tokens. "
                               f"However, you requested {num_prompt + requested} tokens "
                               f"({num_prompt} in the messages, {requested} in the completion).",
                          param=param, code=ErrorCode.CONTEXT_LENGTH_EXCEEDED)
    return requested


def _find_stop(text: str, stops: list[str]) -> int:
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else -1


async def generate_text(engine, tokenizer, request_id: str, prompt_ids: list[int],
                        params: SamplingParams, priority: int = 0,
                        extra_key: str | None = None,
                        lora: str | None = None) -> AsyncIterator[TextChunk]:
    """Yield text deltas; the last chunk carries finish_reason. Stop strings end the request
    here (and abort it in the engine); text that could begin a stop string is held back."""
    detok = tokenizer.new_detokenizer()
    stops = params.stop
    hold = max((len(s) for s in stops), default=1) - 1
    special_stops = set(tokenizer.stop_token_ids) | set(params.stop_token_ids)
    pending, completion, cached, queued = "", 0, 0, None
    pending_logprobs: list = []
    finished = False
    try:
        async for out in engine.generate(request_id, prompt_ids, params, priority=priority,
                                         extra_key=extra_key, lora=lora):
            if out.finish_reason == "error":
                raise EngineError(400, out.error or "the request could not be scheduled",
                                  code=ErrorCode.REQUEST_FAILED)
            completion += len(out.new_token_ids)
            cached = out.num_cached_tokens
            queued = out.queue_time_s if queued is None else queued
            ids = out.new_token_ids
            if out.finished and out.finish_reason == "stop" and not params.ignore_eos:
                ids = [t for t in ids if t not in special_stops]
            if out.logprobs:
                pending_logprobs += [e for e in out.logprobs if e.token_id in ids]
            pending += detok.push(ids)
            if out.finished:
                pending += detok.flush()
            cut = _find_stop(pending, stops) if stops else -1
            if cut >= 0:
                finished = True
                engine.abort(request_id)
                yield TextChunk(pending[:cut], "stop", len(prompt_ids), completion, cached, queued,
                                pending_logprobs)
                return
            if out.finished:
                finished = True
                reason = "stop" if out.finish_reason in ("stop", "abort") else out.finish_reason
                yield TextChunk(pending, reason, len(prompt_ids), completion, cached, queued,
                                pending_logprobs)
                return
            emit = len(pending) - hold if stops else len(pending)
            if emit > 0:
                yield TextChunk(pending[:emit], None, len(prompt_ids), completion, cached, queued,
                                pending_logprobs)
                pending, pending_logprobs = pending[emit:], []
    finally:
        if not finished:  # client went away or the consumer stopped early
            engine.abort(request_id)


def chat_messages(body: ChatCompletionRequest) -> list[dict]:
    """The request's messages as template input: tools in the system prompt, earlier tool
    calls and tool results as text (structured/tool_calls.py documents the format)."""
    messages = []
    for m in body.messages:
        message = {"role": m.role, "content": m.text()}
        if m.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in m.tool_calls]
        messages.append(message)
    return render_messages(messages, body.active_tools())


async def attach_grammar(params: SamplingParams, body, tokenizer, executor=None) -> None:
    """Constrain a chat request that asks for JSON or offers tools: compile its grammar (off
    the event loop; cached per schema) and give params a matcher of its own."""
    if not isinstance(body, ChatCompletionRequest):
        return
    choice = body.tool_choice_name()
    request = StructuredRequest(
        response_format=body.response_format.model_dump(by_alias=True)
        if body.response_format else None,
        tools=tuple(body.active_tools()), tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls)
    if not request.constrains:
        return
    if isinstance(executor, SimulatedExecutor):  # its tokens are synthetic: nothing to mask
        param = "tools" if request.tools else "response_format"
        raise EngineError(400, f"{param} is not supported by the simulated engine", param,
                          code=ErrorCode.UNSUPPORTED_PARAMETER)
    compiler = await asyncio.to_thread(compiler_for, tokenizer)
    compiled = await asyncio.to_thread(compiler.compile, request)
    if compiled is not None:
        params.grammar = GrammarState(compiled, compiler.vocab_size)


async def tool_call_chunks(chunks: AsyncIterator[TextChunk]) -> AsyncIterator[TextChunk]:
    """Text chunks -> content plus delta.tool_calls; a turn that called a tool and stopped
    finishes with "tool_calls"."""
    parser = ToolCallStream()
    async for chunk in chunks:
        content, deltas = parser.push(chunk.text)
        if chunk.finish_reason is not None:
            content += parser.finish()
        reason = chunk.finish_reason
        if reason == "stop" and parser.called:
            reason = "tool_calls"
        yield replace(chunk, text=content, tool_calls=deltas, finish_reason=reason)
