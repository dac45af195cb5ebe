"""From a request's `response_format` / `tools` to one compiled xgrammar grammar.

    compiler = compiler_for(tokenizer, vocab_size)     # once per tokenizer (about 1 s)
    compiled = compiler.compile(StructuredRequest(response_format=..., tools=..., ...))

Compiled grammars are cached by xgrammar (keyed by the schema text), so a repeated schema
costs nothing. A schema that is not a valid JSON Schema, or one xgrammar cannot turn into a
grammar, is refused with a 400 in the OpenAI shape, naming the parameter.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from builtin_engine.errors import EngineError
from builtin_engine.structured import tool_calls as fmt

# Outputs are compact JSON with at most one space between tokens: small models otherwise
# tend to pad with whitespace until max_tokens runs out.
_MAX_WHITESPACE = 1


@dataclass(frozen=True)
class StructuredRequest:
    """What a request constrains. `tool_choice` is "auto", "required" or a function name."""
    response_format: dict | None = None
    tools: tuple[dict, ...] = ()
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True

    @property
    def constrains(self) -> bool:
        kind = (self.response_format or {}).get("type", "text")
        return kind != "text" or bool(self.tools)


def _check_schema(schema: Any, param: str) -> None:
    import jsonschema

    if not isinstance(schema, (dict, bool)):
        raise EngineError(400, f"{param} must be a JSON Schema object", param)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise EngineError(400, f"{param} is not a valid JSON Schema: {exc.message}"
                          + (f" (at {where})" if where else ""), param) from None


class StructuredCompiler:
    def __init__(self, tokenizer, vocab_size: int | None = None):
        import xgrammar as xgr

        self._xgr = xgr
        tok = tokenizer.tokenizer  # the `tokenizers` object behind EngineTokenizer
        size = max(tokenizer.vocab_size, vocab_size or 0)
        vocab = [tok.id_to_token(i) or "" for i in range(tokenizer.vocab_size)]
        meta = xgr.TokenizerInfo._detect_metadata_from_hf(tok.to_str())
        self.info = xgr.TokenizerInfo(vocab, meta["vocab_type"], vocab_size=size,
                                      stop_token_ids=sorted(tokenizer.stop_token_ids),
                                      add_prefix_space=meta["add_prefix_space"])
        self.vocab_size = size
        self._compiler = xgr.GrammarCompiler(self.info, max_threads=1)
        self._lock = threading.Lock()

    def compile(self, request: StructuredRequest):
        """The CompiledGrammar for the request, or None when it constrains nothing."""
        if request.tools:
            return self._guarded(lambda: self._compiler.compile_structural_tag(
                self._tools_tag(request)), "tools")
        rf = request.response_format or {"type": "text"}
        if rf["type"] == "json_object":
            return self._guarded(lambda: self._compiler.compile_json_schema(
                {"type": "object"}, any_whitespace=False), "response_format")
        if rf["type"] == "json_schema":
            spec = rf["json_schema"]
            param = "response_format.json_schema.schema"
            schema = spec.get("schema", {})
            _check_schema(schema, param)
            # strict or not, the output follows the schema exactly: the extra properties a
            # non-strict schema allows only let a small model ramble until max_tokens
            return self._guarded(lambda: self._compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, strict_mode=True), param)
        return None

    def _guarded(self, build, param: str):
        with self._lock:
            try:
                return build()
            except EngineError:
                raise
            except Exception as exc:  # xgrammar's own errors for schemas it cannot serve
                raise EngineError(400, f"{param}: the schema cannot be used for constrained "
                                  f"decoding: {exc}", param) from None

    def _tools_tag(self, request: StructuredRequest):
        x = self._xgr.structural_tag
        tools = request.tools
        if request.tool_choice not in ("auto", "required"):
            tools = tuple(t for t in tools if t["function"]["name"] == request.tool_choice)
        tags = []
        for i, tool in enumerate(tools):
            fn = tool["function"]
            schema = fn.get("parameters") or {"type": "object"}
            _check_schema(schema, f"tools[{i}].function.parameters")
            tags.append(x.TagFormat(
                begin=fmt.CALL_BEGIN + fn["name"] + fmt.ARGS_PREFIX,
                content=x.JSONSchemaFormat(json_schema=schema,
                                           max_whitespace_cnt=_MAX_WHITESPACE),
                end=fmt.CALL_END))
        single = not request.parallel_tool_calls or request.tool_choice not in ("auto", "required")
        if request.tool_choice == "auto":
            body = x.TriggeredTagsFormat(triggers=[fmt.TRIGGER], tags=tags,
                                         stop_after_first=single)
        else:  # only calls, no text: a small model would otherwise talk until max_tokens
            body = x.TagsWithSeparatorFormat(tags=tags, separator="\n", at_least_one=True,
                                             stop_after_first=single)
        return self._xgr.StructuralTag(format=body)


_COMPILERS: dict[int, StructuredCompiler] = {}
_COMPILERS_LOCK = threading.Lock()


def compiler_for(tokenizer, vocab_size: int | None = None) -> StructuredCompiler:
    """The tokenizer's compiler, built on first use (reading the vocabulary takes ~1 s)."""
    with _COMPILERS_LOCK:
        compiler = _COMPILERS.get(id(tokenizer))
        if compiler is None:
            compiler = _COMPILERS[id(tokenizer)] = StructuredCompiler(tokenizer, vocab_size)
        return compiler
